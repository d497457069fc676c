"""The scheduler's decisions, pure: which `StartEpisode` commands to emit now.

Inputs: the run's target (`Target`: N episodes, group size G, capacity, seed, max steps), the tasks known
from the compacted `tasks` topic, the episodes started so far (their `StartEpisode` commands) and the ones
ended (a trajectory on `trajectories.completed` or `trajectories.failed`). Output: the commands to send on
`episode.commands`, keyed by episode id.

Rules:

* Backpressure: episodes in flight (started, not ended) never exceed `capacity`; nothing new starts while
  the pipeline is full.
* Never more than N episodes: the count of started episodes is what the log says, so a restarted scheduler
  that read its earlier commands back starts none twice.
* Episodes come in groups of G on one task (group-relative advantages): episode i belongs to group i // G;
  the group's task is drawn from the sorted task ids with a generator seeded by (seed, group), so the draw
  does not depend on when or how often the scheduler ran; with `round_robin`, group g takes the g-th task
  of the sorted ids (modulo their count), so an evaluation covers every task equally. A group already
  begun keeps the task (and version) of its first command. Each episode's sampling seed comes from (seed, i).
* Difficulty (`actors.scheduler.difficulty`): the tasks topic may also hold `TaskDifficulty` records; the
  newest of each task id and version gives the task its bucket (a task version without one is
  `unmeasured`). A drawn group first draws a bucket by `Target.bucket_weights` among the buckets that have
  tasks (seeded by (seed, group)), then a task uniformly within it. Tasks the policy always or never
  solves are retired: drawn only on retest groups (every `retest_every`-th group, uniformly among them),
  or when every task is retired (rather than stalling; `progress` says so). With only unmeasured tasks the
  draw is exactly the plain seeded one; `round_robin` ignores difficulty (an evaluation covers all).
* Paused: while the run's control state (`run.control`, folded by `actors.guard.control`) is paused,
  nothing new starts; episodes in flight go on. A `RunResumed` lifts it.
* Ids and times come from the injected `Origin` (its `IdSource` and `Clock`); nothing else is read.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from actors.guard import control as run_control
from actors.scheduler.defaults import (
    DEFAULT_CAPACITY,
    DEFAULT_GROUP_SIZE,
    DEFAULT_MAX_STEPS,
    DEFAULT_RETEST_EVERY,
)
from actors.scheduler.difficulty import RETIRED, Bucket, BucketWeights, bucket_of
from schemas.commands import StartEpisode
from schemas.common import EpisodeConfig
from schemas.difficulty import TaskDifficulty
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

SEED_BITS = 31


@dataclass(frozen=True, slots=True)
class Target:
    """What the run asks for."""

    run_id: str
    episodes: int
    group_size: int = DEFAULT_GROUP_SIZE
    capacity: int = DEFAULT_CAPACITY
    seed: int = 0
    max_steps: int = DEFAULT_MAX_STEPS
    policy_version: int = 0
    round_robin: bool = False  # tasks in turn instead of drawn: evaluations cover every task equally
    bucket_weights: BucketWeights = field(default_factory=BucketWeights)  # the draw over difficulty buckets
    retest_every: int = DEFAULT_RETEST_EVERY  # every N-th group draws a retired task; 0: never

    def __post_init__(self) -> None:
        if self.episodes < 0:
            raise ValueError(f"episodes must be >= 0, not {self.episodes}")
        if self.group_size < 1:
            raise ValueError(f"group size must be >= 1, not {self.group_size}")
        if self.capacity < 1:
            raise ValueError(f"capacity must be >= 1, not {self.capacity}")
        if self.max_steps < 1:
            raise ValueError(f"max steps must be >= 1, not {self.max_steps}")
        if self.retest_every < 0:
            raise ValueError(f"retest every must be >= 0 (0: never), not {self.retest_every}")

    def group_id(self, group: int) -> str:
        return f"{self.run_id}/g{group:06d}"

    def is_retest(self, group: int) -> bool:
        """Group `group` draws among the retired tasks (groups N-1, 2N-1, ... for `retest_every` N)."""
        return self.retest_every > 0 and (group + 1) % self.retest_every == 0


@dataclass(frozen=True, slots=True)
class TaskRef:
    """What a StartEpisode needs of a task."""

    task_id: str
    task_version: str
    image: str

    @classmethod
    def of(cls, published: TaskPublished) -> TaskRef:
        return cls(published.task_id, published.task_version, published.image)


@dataclass
class SchedulerState:
    """The scheduler's view of the run, built from the log (mutable; `observe_*` are idempotent)."""

    tasks: dict[str, TaskRef] = field(default_factory=dict)
    started: dict[str, StartEpisode] = field(default_factory=dict)  # episode id -> its command
    completed: dict[str, float] = field(default_factory=dict)  # episode id -> reward
    failed: dict[str, str] = field(default_factory=dict)  # episode id -> failure class
    control: run_control.ControlState | None = None  # the run's control log folded (None: nothing read)
    control_ids: set[str] = field(default_factory=set)  # the control records folded, by event id
    # The newest TaskDifficulty of each (task id, task version), in the tasks topic's (one partition) order.
    difficulties: dict[tuple[str, str], TaskDifficulty] = field(default_factory=dict)

    def observe_control(self, record: object, run_id: str) -> None:
        """Fold a record of `run.control` once (another run's changes nothing). Once: the log is read back
        from its beginning after the rebuild, and a pause read again after its resume must not pause."""
        event_id = getattr(getattr(record, "meta", None), "event_id", None)
        if event_id is not None:
            if event_id in self.control_ids:
                return
            self.control_ids.add(event_id)
        self.control = run_control.apply(self.control or run_control.ControlState(run_id), record)

    @property
    def paused(self) -> bool:
        return self.control is not None and self.control.is_paused

    def observe_task(self, published: TaskPublished) -> None:
        self.tasks[published.task_id] = TaskRef.of(published)

    def observe_difficulty(self, measured: TaskDifficulty) -> None:
        """The newest measurement of a task version wins (the log read again changes nothing)."""
        self.difficulties[(measured.task_id, measured.task_version)] = measured

    def bucket(self, task: TaskRef) -> Bucket:
        return bucket_for(task, self.difficulties)

    def retired(self) -> list[str]:
        """The ids of the known tasks whose version the policy always or never solves."""
        return sorted(task_id for task_id, task in self.tasks.items() if self.bucket(task) in RETIRED)

    def observe_start(self, command: StartEpisode, run_id: str) -> bool:
        """Count a StartEpisode of the run (read back or just sent); False when it is another run's."""
        if command.run_id != run_id:
            return False
        self.started.setdefault(command.episode_id, command)
        return True

    def observe_trajectory(self, trajectory: TrajectoryCompleted | TrajectoryFailed, run_id: str) -> bool:
        """Count an ended episode of the run (a second copy changes nothing); False for another run's."""
        meta = trajectory.meta
        if meta.run_id != run_id:
            return False
        if isinstance(trajectory, TrajectoryCompleted):
            self.completed.setdefault(meta.episode_id, trajectory.reward)
        else:
            self.failed.setdefault(meta.episode_id, trajectory.failure.value)
        return True

    @property
    def ended(self) -> set[str]:
        return set(self.completed) | set(self.failed)

    @property
    def in_flight(self) -> int:
        return len(set(self.started) - self.ended)

    def done(self, target: Target) -> bool:
        """N episodes of the run have ended."""
        return len(self.ended) >= target.episodes


def bucket_for(task: TaskRef, difficulties: Mapping[tuple[str, str], TaskDifficulty]) -> Bucket:
    """The task's bucket from the measurement of its version (none, or one without a sample: unmeasured).
    Recomputed from the counts, so that a record's bucket text cannot disagree with the edges here."""
    measured = difficulties.get((task.task_id, task.task_version))
    if measured is None or measured.samples <= 0 or not 0 <= measured.passes <= measured.samples:
        return Bucket.UNMEASURED
    return bucket_of(measured.passes / measured.samples)


class DrawReason(StrEnum):
    ROUND_ROBIN = "round_robin"
    WEIGHTED = "weighted"  # a bucket by weight, a task within it
    RETEST = "retest"  # a retest group: among the retired tasks
    ALL_RETIRED = "all_retired"  # nothing else left: among the retired tasks
    ZERO_WEIGHTS = "zero_weights"  # every bucket left weighs 0: among all of them


@dataclass(frozen=True, slots=True)
class Draw:
    task: TaskRef
    reason: DrawReason
    bucket: Bucket


def draw_group(
    target: Target,
    group: int,
    tasks: Mapping[str, TaskRef],
    difficulties: Mapping[tuple[str, str], TaskDifficulty] | None = None,
) -> Draw:
    """The task of a new group and why it was chosen; deterministic for (seed, group, tasks, difficulties)."""
    ids = sorted(tasks)
    known = difficulties or {}
    buckets = {task_id: bucket_for(tasks[task_id], known) for task_id in ids}
    if target.round_robin:
        chosen = ids[group % len(ids)]
        return Draw(tasks[chosen], DrawReason.ROUND_ROBIN, buckets[chosen])
    # The same generator as before difficulties existed: a set of unmeasured tasks draws as it always did.
    pick = random.Random(f"{target.seed}:group:{group}")
    retired = [task_id for task_id in ids if buckets[task_id] in RETIRED]
    active = [task_id for task_id in ids if buckets[task_id] not in RETIRED]
    if retired and (not active or target.is_retest(group)):
        chosen = pick.choice(retired)
        reason = DrawReason.RETEST if active else DrawReason.ALL_RETIRED
        return Draw(tasks[chosen], reason, buckets[chosen])
    by_bucket: dict[Bucket, list[str]] = {}
    for task_id in active:
        by_bucket.setdefault(buckets[task_id], []).append(task_id)
    weighted = [
        (bucket, weight)
        for bucket in Bucket  # a fixed order: the draw must not depend on the order tasks arrived in
        if bucket in by_bucket and (weight := target.bucket_weights.of(bucket)) > 0
    ]
    if not weighted:
        chosen = pick.choice(active)
        return Draw(tasks[chosen], DrawReason.ZERO_WEIGHTS, buckets[chosen])
    if len(weighted) == 1:
        bucket = weighted[0][0]
    else:
        weigh = random.Random(f"{target.seed}:bucket:{group}")
        bucket = weigh.choices([b for b, _ in weighted], weights=[w for _, w in weighted])[0]
    chosen = pick.choice(by_bucket[bucket])
    return Draw(tasks[chosen], DrawReason.WEIGHTED, bucket)


def group_task(
    target: Target,
    group: int,
    tasks: Mapping[str, TaskRef],
    difficulties: Mapping[tuple[str, str], TaskDifficulty] | None = None,
) -> TaskRef:
    """The task of `group` (`draw_group`'s task)."""
    return draw_group(target, group, tasks, difficulties).task


def episode_seed(target: Target, index: int) -> int:
    return random.Random(f"{target.seed}:episode:{index}").getrandbits(SEED_BITS)


def _group_members(started: Iterable[StartEpisode], group_id: str) -> list[StartEpisode]:
    return [command for command in started if command.group_id == group_id]


def decide(state: SchedulerState, target: Target, origin: Origin) -> list[StartEpisode]:
    """The StartEpisode commands to send now (the caller sends them, then `observe_start`s each)."""
    commands: list[StartEpisode] = []
    if not state.tasks or state.paused:
        return commands
    started = list(state.started.values())
    in_flight = state.in_flight
    index = len(started)
    while index < target.episodes and in_flight < target.capacity:
        group = index // target.group_size
        group_id = target.group_id(group)
        members = _group_members([*started, *commands], group_id)
        if members:
            first = members[0]
            task = TaskRef(first.task_id, first.task_version, first.image)
        else:
            task = group_task(target, group, state.tasks, state.difficulties)
        commands.append(
            StartEpisode(
                meta=origin.record_meta(),
                run_id=target.run_id,
                episode_id=origin.ids.new_id(),
                task_id=task.task_id,
                task_version=task.task_version,
                policy_version=target.policy_version,
                config=EpisodeConfig(max_steps=target.max_steps),
                image=task.image,
                group_id=group_id,
                seed=episode_seed(target, index),
            )
        )
        index += 1
        in_flight += 1
    return commands


def pause_notice(was_paused: bool, state: SchedulerState, target: Target) -> str | None:
    """The line for stderr when the run became paused or resumed since `was_paused` (None: no change)."""
    control = state.control
    if control is None or control.is_paused == was_paused:
        return None
    run = target.run_id or "''"
    if control.paused is not None:
        return f"paused: {control.paused.reason}; resume with trialog run resume {run}"
    reason = control.resumed.reason if control.resumed is not None else ""
    return f"resumed{f': {reason}' if reason else ''}; starting episodes again"


def progress(state: SchedulerState, target: Target) -> str:
    """One line for stderr: started, ended (completed / failed), in flight; with measured tasks, how many
    are retired and how many started groups are on a retired task (retests, or all retired)."""
    line = (
        f"scheduler {target.run_id or '(default run)'}: started {len(state.started)}/{target.episodes}, "
        f"ended {len(state.ended)}/{target.episodes} (completed {len(state.completed)}, "
        f"failed {len(state.failed)}), in flight {state.in_flight}/{target.capacity}"
    )
    if not state.difficulties or target.round_robin:
        return line
    retired = state.retired()
    on_retired = len(retired_groups(state))
    line += f", retired tasks {len(retired)}/{len(state.tasks)}, groups on retired tasks {on_retired}"
    if retired and len(retired) == len(state.tasks):
        line += " (every task is retired: drawing them anyway)"
    return line


def retired_groups(state: SchedulerState) -> set[str]:
    """The started groups whose task (version) is retired now: retest groups, or drawn when all were."""
    retired = {(task_id, state.tasks[task_id].task_version) for task_id in state.retired()}
    return {c.group_id for c in state.started.values() if (c.task_id, c.task_version) in retired}
