"""The learner's planner: which trajectories to train on, and when, as a pure fold.

`apply(state, input) -> (state, decisions)`. Inputs are what the learner process observes: a trajectory
read from `trajectories.completed` at a (topic, partition, offset), an unreadable record there, a clock
tick, and the end of a training step on a ready group. Nothing here reads a clock, a topic or a model;
the worker feeds inputs in and carries out the decisions (`learner.learner`, `learner.loop`).

The rules:
- Trajectories are grouped by their group id (one task, one group of episodes started together): a group's
  rewards are compared with each other (GRPO), so a group is trained as a whole.
- A trajectory sampled more than `max_staleness` policy versions before the current one is dropped, when it
  arrives or when a training step makes a waiting one too old (counted).
- A full group (`group_size` members) whose rewards are all equal teaches nothing about which behaviour
  was better: it is skipped (counted). Otherwise it becomes ready, with each member's advantage.
- A group still incomplete `group_timeout_s` after its first member arrived is trained as it is when it has
  at least two members with different rewards, and skipped otherwise (counted). Members that arrive for a
  group already closed are counted late and not learned from.
- An episode seen before (a redelivered trajectory) is counted as a duplicate and ignored.
- The run's control log (`run.control`, folded by `actors.guard.control`) comes in as `Control`, the whole
  control state each time it changes. A trajectory a quarantine rule matches is dropped (counted
  quarantined), when it arrives or, for one waiting in a pending or ready group, when the rule arrives: a
  ready group that loses members has its advantages recomputed from the members left, or is skipped when
  they are fewer than two (counted unpaired) or all equal (all-equal). A trajectory whose grader is not
  vouched for (canary clearance, `ControlState.vouched`) is held, and joins its group once a later
  control state vouches for it; it is checked then as if it had just arrived (late, stale). No `Control`
  yet: nothing is quarantined and every grader is vouched for (the learner process reads the control log
  to its end before it takes in any trajectory).
- A training step takes the oldest ready groups, up to `groups_per_step` (`next_step`): one group when the
  learner keeps up, several when it has a backlog (after a restart, or behind fast rollouts), which the
  next versions would otherwise age past `max_staleness` one group at a time.

The state also holds the next offset to read per partition: every record before it has been accounted
for (trained, dropped, skipped, or waiting in `held`/`pending`/`ready`, which the checkpoint stores; the
control state is not stored: it is read again from `run.control`). Restarting
from a checkpointed state and those offsets neither loses nor repeats a trajectory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from actors.guard.control import ControlState
from learner.objective import group_advantages, is_stale
from schemas.trajectories import TrajectoryCompleted


@dataclass(frozen=True, slots=True)
class Position:
    """Where a record was read: its topic, partition and offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Arrival:
    """A trajectory as the learner received it (`at_us`: the learner's clock at reception)."""

    trajectory: TrajectoryCompleted
    position: Position
    at_us: int

    @property
    def episode_id(self) -> str:
        return self.trajectory.meta.episode_id

    @property
    def group_key(self) -> str:
        # Trajectories started without a group id are grouped by task (still the same prompt).
        meta = self.trajectory.meta
        return self.trajectory.group_id or f"task:{meta.task_id}@{meta.task_version}"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A record that could not be decoded as a trajectory: only its offset is accounted for."""

    position: Position


@dataclass(frozen=True, slots=True)
class Tick:
    now_us: int


@dataclass(frozen=True, slots=True)
class Trained:
    """The worker finished one training step on the ready groups `group_keys`: the policy version advances
    by one."""

    group_keys: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.group_keys or len(set(self.group_keys)) != len(self.group_keys):
            raise ValueError(f"a step trains one or more distinct groups, not {self.group_keys!r}")


@dataclass(frozen=True, slots=True)
class Discarded:
    """The ready group `group_key` gave no usable sample (every prompt refused): no step, no new version."""

    group_key: str


@dataclass(frozen=True, slots=True)
class Control:
    """The run's control state now (`actors.guard.control`): quarantine rules and grader clearances."""

    state: ControlState


Input = Arrival | Unreadable | Tick | Trained | Discarded | Control


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    group_size: int = 4
    group_timeout_s: float = 120.0
    max_staleness: int = 2
    groups_per_step: int = 1  # the most ready groups one training step takes

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(f"a group needs at least 2 members to compare rewards, not {self.group_size}")
        if self.group_timeout_s <= 0 or self.max_staleness < 0:
            raise ValueError("group timeout must be > 0 and max staleness >= 0")
        if self.groups_per_step < 1:
            raise ValueError(f"a step takes at least one group, not {self.groups_per_step}")


class Why(StrEnum):
    STALE = "stale"
    DUPLICATE = "duplicate"
    LATE = "late"  # its group was already trained or skipped
    ALL_EQUAL = "all_equal"
    TIMEOUT = "timeout"  # incomplete at its deadline, with nothing to compare
    QUARANTINED = "quarantined"  # a quarantine rule of run.control matches it
    UNPAIRED = "unpaired"  # left alone in a ready group whose other members were quarantined


@dataclass(frozen=True, slots=True)
class ReadyGroup:
    """A group to train on, with each member's group-relative advantage (same order as `members`)."""

    group_key: str
    members: tuple[Arrival, ...]
    advantages: tuple[float, ...]
    partial: bool  # trained at its timeout with fewer than group_size members


@dataclass(frozen=True, slots=True)
class Ready:
    group: ReadyGroup


@dataclass(frozen=True, slots=True)
class Dropped:
    episode_ids: tuple[str, ...]
    why: Why
    group_key: str


Decision = Ready | Dropped


@dataclass(frozen=True, slots=True)
class Counters:
    arrived: int = 0
    trained: int = 0  # trajectories in completed training steps
    stale: int = 0
    duplicate: int = 0
    late: int = 0
    all_equal: int = 0  # trajectories in groups skipped because their rewards were all equal
    timeout: int = 0  # trajectories in groups skipped at their timeout
    unreadable: int = 0
    unusable: int = 0  # trajectories in ready groups that gave no usable sample
    steps: int = 0  # training steps (= policy versions published by this learner)
    partial_steps: int = 0
    quarantined: int = 0  # trajectories a quarantine rule matched (on arrival or while waiting)
    unpaired: int = 0  # trajectories left alone in a ready group when the rest were quarantined
    held: int = 0  # trajectories held for their grader's clearance at arrival (released or not since)

    def add(self, **amounts: int) -> Counters:
        return dataclasses.replace(self, **{k: getattr(self, k) + v for k, v in amounts.items()})


@dataclass(frozen=True, slots=True)
class PlannerState:
    version: int = 0  # the current policy version (the one the next training step starts from)
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)  # next offset to read
    pending: Mapping[str, tuple[Arrival, ...]] = field(default_factory=dict)  # incomplete groups
    ready: tuple[ReadyGroup, ...] = ()  # decided, not yet trained (oldest first)
    seen: frozenset[str] = frozenset()  # episode ids accounted for
    closed: frozenset[str] = frozenset()  # group keys trained or skipped
    counters: Counters = Counters()
    # episode id -> a trajectory waiting for its grader to be vouched for (in arrival order)
    held: Mapping[str, Arrival] = field(default_factory=dict)
    control: ControlState | None = None  # the run's control state (not checkpointed: read again)

    def opened_us(self, group_key: str) -> int:
        """When the group's first member arrived."""
        return min(member.at_us for member in self.pending[group_key])

    @property
    def waiting(self) -> int:
        """Trajectories waiting (held, pending or ready): the checkpoint carries them."""
        pending = sum(len(m) for m in self.pending.values())
        return len(self.held) + pending + sum(len(g.members) for g in self.ready)


def apply(state: PlannerState, event: Input, config: PlannerConfig) -> tuple[PlannerState, list[Decision]]:
    match event:
        case Arrival():
            return _arrive(_advance(state, event.position), event, config)
        case Unreadable(position=position):
            advanced = _advance(state, position)
            return dataclasses.replace(advanced, counters=advanced.counters.add(unreadable=1)), []
        case Tick(now_us=now_us):
            return _expire(state, now_us, config)
        case Trained(group_keys=keys):
            return _trained(state, keys, config)
        case Discarded(group_key=key):
            group = _ready_group(state, key)
            ready = tuple(g for g in state.ready if g.group_key != key)
            return dataclasses.replace(
                state, ready=ready, counters=state.counters.add(unusable=len(group.members))
            ), []
        case Control(state=control):
            return _controlled(dataclasses.replace(state, control=control), config)
    raise TypeError(f"not a planner input: {event!r}")


def _advance(state: PlannerState, position: Position) -> PlannerState:
    where = (position.topic, position.partition)
    if state.offsets.get(where, 0) > position.offset:
        return state  # re-read below a known offset: offsets never go back
    return dataclasses.replace(state, offsets={**state.offsets, where: position.offset + 1})


def _arrive(
    state: PlannerState, arrival: Arrival, config: PlannerConfig
) -> tuple[PlannerState, list[Decision]]:
    episode, key = arrival.episode_id, arrival.group_key
    if episode in state.seen:
        return _counted(state, "duplicate", 1), [Dropped((episode,), Why.DUPLICATE, key)]
    seen = dataclasses.replace(state, seen=state.seen | {episode}, counters=state.counters.add(arrived=1))
    control = state.control
    if control is not None and control.quarantine_rule(arrival.trajectory) is not None:
        return _counted(seen, "quarantined", 1), [Dropped((episode,), Why.QUARANTINED, key)]
    unvouched = control is not None and not control.vouched(arrival.trajectory)
    if unvouched and key not in state.closed and not _stale(arrival, state, config):
        held = dataclasses.replace(seen, held={**state.held, episode: arrival})
        return _counted(held, "held", 1), []
    return _join(seen, arrival, config)  # late and stale ones are dropped at once, held or not


def _join(
    state: PlannerState, arrival: Arrival, config: PlannerConfig
) -> tuple[PlannerState, list[Decision]]:
    """`arrival` (accounted for, trainable) joins its pending group, which closes when full."""
    key = arrival.group_key
    if key in state.closed:
        return _counted(state, "late", 1), [Dropped((arrival.episode_id,), Why.LATE, key)]
    if _stale(arrival, state, config):
        return _counted(state, "stale", 1), [Dropped((arrival.episode_id,), Why.STALE, key)]
    members = (*state.pending.get(key, ()), arrival)
    grown = dataclasses.replace(state, pending={**state.pending, key: members})
    if len(members) < config.group_size:
        return grown, []
    return _close(grown, key, partial=False)


def _stale(arrival: Arrival, state: PlannerState, config: PlannerConfig) -> bool:
    return is_stale(arrival.trajectory.min_policy_version, state.version, config.max_staleness)


def _controlled(state: PlannerState, config: PlannerConfig) -> tuple[PlannerState, list[Decision]]:
    """A new control state: quarantine what its rules match among the waiting trajectories (held, pending,
    ready), then release the held ones it vouches for into their groups, in arrival order."""
    control = state.control
    assert control is not None
    decisions: list[Decision] = []
    state = _quarantine_held(state, control, decisions)
    state = _quarantine_pending(state, control, decisions)
    state = _quarantine_ready(state, control, decisions)
    released = [arrival for arrival in state.held.values() if control.vouched(arrival.trajectory)]
    if released:
        gone = {arrival.episode_id for arrival in released}
        state = dataclasses.replace(state, held={e: a for e, a in state.held.items() if e not in gone})
    for arrival in released:
        state, joined = _join(state, arrival, config)
        decisions += joined
    return state, decisions


def _quarantine_held(state: PlannerState, control: ControlState, decisions: list[Decision]) -> PlannerState:
    matched = [a for a in state.held.values() if control.quarantine_rule(a.trajectory) is not None]
    if not matched:
        return state
    for arrival in matched:
        decisions.append(Dropped((arrival.episode_id,), Why.QUARANTINED, arrival.group_key))
    gone = {arrival.episode_id for arrival in matched}
    held = {episode: a for episode, a in state.held.items() if episode not in gone}
    return dataclasses.replace(state, held=held, counters=state.counters.add(quarantined=len(matched)))


def _quarantine_pending(
    state: PlannerState, control: ControlState, decisions: list[Decision]
) -> PlannerState:
    pending: dict[str, tuple[Arrival, ...]] = {}
    quarantined = 0
    for key, members in state.pending.items():
        matched = {m.episode_id for m in members if control.quarantine_rule(m.trajectory) is not None}
        if matched:
            ids = tuple(m.episode_id for m in members if m.episode_id in matched)
            decisions.append(Dropped(ids, Why.QUARANTINED, key))
            quarantined += len(matched)
        kept = tuple(m for m in members if m.episode_id not in matched)
        if kept:
            pending[key] = kept  # a group that lost members may still fill up
    if not quarantined:
        return state
    return dataclasses.replace(state, pending=pending, counters=state.counters.add(quarantined=quarantined))


def _quarantine_ready(state: PlannerState, control: ControlState, decisions: list[Decision]) -> PlannerState:
    """Ready groups lose the members a rule matches: the advantages are group-relative, so they are
    recomputed from the members left; fewer than two, or all equal, and the group is skipped."""
    ready: list[ReadyGroup] = []
    counters = state.counters
    for group in state.ready:
        matched = tuple(
            m.episode_id for m in group.members if control.quarantine_rule(m.trajectory) is not None
        )
        if not matched:
            ready.append(group)
            continue
        decisions.append(Dropped(matched, Why.QUARANTINED, group.group_key))
        counters = counters.add(quarantined=len(matched))
        kept = tuple(m for m in group.members if m.episode_id not in matched)
        advantages = group_advantages([m.trajectory.reward for m in kept])
        if advantages is None:
            if kept:
                why = Why.UNPAIRED if len(kept) < 2 else Why.ALL_EQUAL
                decisions.append(Dropped(tuple(m.episode_id for m in kept), why, group.group_key))
                counters = counters.add(**{why.value: len(kept)})
            continue
        recomputed = ReadyGroup(group.group_key, kept, tuple(advantages), partial=True)
        decisions.append(Ready(recomputed))
        ready.append(recomputed)
    if counters is state.counters:
        return state
    return dataclasses.replace(state, ready=tuple(ready), counters=counters)


def _expire(state: PlannerState, now_us: int, config: PlannerConfig) -> tuple[PlannerState, list[Decision]]:
    deadline_us = int(config.group_timeout_s * 1_000_000)
    decisions: list[Decision] = []
    for key in sorted(state.pending, key=state.opened_us):
        if now_us - state.opened_us(key) >= deadline_us:
            state, closed = _close(state, key, partial=True)
            decisions += closed
    return state, decisions


def _close(state: PlannerState, key: str, *, partial: bool) -> tuple[PlannerState, list[Decision]]:
    """Take the group out of `pending`: ready when its rewards differ, skipped otherwise."""
    members = state.pending[key]
    pending = {k: v for k, v in state.pending.items() if k != key}
    closed = dataclasses.replace(state, pending=pending, closed=state.closed | {key})
    advantages = group_advantages([m.trajectory.reward for m in members])
    episodes = tuple(m.episode_id for m in members)
    if advantages is None:
        why = Why.TIMEOUT if partial and len(members) < 2 else Why.ALL_EQUAL
        return _counted(closed, why.value, len(members)), [Dropped(episodes, why, key)]
    group = ReadyGroup(key, members, tuple(advantages), partial)
    return dataclasses.replace(closed, ready=(*closed.ready, group)), [Ready(group)]


def _ready_group(state: PlannerState, key: str) -> ReadyGroup:
    group = next((g for g in state.ready if g.group_key == key), None)
    if group is None:
        raise ValueError(f"group {key!r} is not ready for training")
    return group


def next_step(state: PlannerState, config: PlannerConfig) -> tuple[ReadyGroup, ...]:
    """The groups the next training step takes: the oldest ready ones, up to `groups_per_step`."""
    return state.ready[: config.groups_per_step]


def _trained(
    state: PlannerState, keys: tuple[str, ...], config: PlannerConfig
) -> tuple[PlannerState, list[Decision]]:
    groups = [_ready_group(state, key) for key in keys]
    counters = state.counters.add(
        trained=sum(len(g.members) for g in groups),
        steps=1,
        partial_steps=int(any(g.partial for g in groups)),
    )
    state = dataclasses.replace(
        state,
        version=state.version + 1,
        ready=tuple(g for g in state.ready if g.group_key not in keys),
        counters=counters,
    )
    return _drop_stale_pending(state, config)


def _drop_stale_pending(state: PlannerState, config: PlannerConfig) -> tuple[PlannerState, list[Decision]]:
    """A new version can make waiting members too old: they leave their group (which may refill)."""
    decisions: list[Decision] = []
    pending: dict[str, tuple[Arrival, ...]] = {}
    dropped = 0
    for key, members in state.pending.items():
        too_old = [
            is_stale(m.trajectory.min_policy_version, state.version, config.max_staleness) for m in members
        ]
        fresh = tuple(m for m, old in zip(members, too_old, strict=True) if not old)
        if len(fresh) < len(members):
            stale = tuple(m.episode_id for m, old in zip(members, too_old, strict=True) if old)
            decisions.append(Dropped(stale, Why.STALE, key))
            dropped += len(stale)
        if fresh:
            pending[key] = fresh
    return dataclasses.replace(state, pending=pending, counters=state.counters.add(stale=dropped)), decisions


def _counted(state: PlannerState, counter: str, amount: int) -> PlannerState:
    return dataclasses.replace(state, counters=state.counters.add(**{counter: amount}))
