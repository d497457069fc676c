"""The planner under the run's control log: quarantined trajectories are never trained on (dropped on
arrival, or taken out of pending and ready groups, whose advantages are then recomputed), and trajectories
whose grader is not vouched for are held until it is, then checked as if they had just arrived."""

from __future__ import annotations

import random

from actors.guard.control import ControlState, apply, fold
from learner import testing
from learner.objective import group_advantages
from learner.state import (
    Arrival,
    Control,
    Dropped,
    Input,
    PlannerConfig,
    PlannerState,
    Position,
    Ready,
    Trained,
    Why,
    next_step,
)
from learner.state import apply as plan
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import Component
from tests.unit.actors.guard_records import (
    GRADED_AT,
    IMAGE,
    RUN,
    cleared,
    graded,
    graded_group,
    pinned,
    rule,
)

CONFIG = PlannerConfig(group_size=3, group_timeout_s=10.0, max_staleness=1)
TOPIC = "run-test.trajectories.completed"
HOLDING = fold(RUN, [pinned(hold=True)])
BAD_IMAGE = "sha256:" + "0b" * 32


class Feeder:
    def __init__(self, control: ControlState | None = None, config: PlannerConfig = CONFIG) -> None:
        self.config = config
        self.state = PlannerState()
        self.offset = 0
        if control is not None:
            self.feed(Control(control))

    def arrive(self, trajectory: TrajectoryCompleted) -> list[object]:
        position = Position(TOPIC, 0, self.offset)
        self.offset += 1
        return self.feed(Arrival(trajectory, position, 0))

    def feed(self, event: Input) -> list[object]:
        self.state, decisions = plan(self.state, event, self.config)
        return list(decisions)

    def control(self, *records: object) -> list[object]:
        state = self.state.control or ControlState(RUN)
        for record in records:
            state = apply(state, record)
        return self.feed(Control(state))


def by_ids(*episodes: str) -> object:
    """A rule by episode ids alone (its version matches nothing)."""
    return rule(Component.IMAGE.value, "sha256:" + "00" * 32, rule_id="by-ids", episodes=episodes)


def bad(t: TrajectoryCompleted) -> TrajectoryCompleted:
    """`t` graded by the faulty image."""
    assert t.grade_versions is not None
    versions = t.grade_versions.__class__(t.grade_versions.verifier, BAD_IMAGE, t.grade_versions.tests,
                                          t.grade_versions.reward_config)  # fmt: skip
    return graded(t, versions, t.graded_at_us)


def test_an_arrival_a_rule_matches_is_dropped_quarantined_and_its_offset_consumed() -> None:
    feeder = Feeder(fold(RUN, [rule(Component.IMAGE.value, BAD_IMAGE)]))
    good, faulty, other = graded_group("g", [1.0, 0.0, 0.5])
    assert feeder.arrive(good) == []
    assert feeder.arrive(bad(faulty)) == [Dropped(("g/e1",), Why.QUARANTINED, "g")]
    assert feeder.arrive(other) == []
    assert feeder.state.counters.quarantined == 1 and feeder.state.counters.arrived == 3
    assert [m.episode_id for m in feeder.state.pending["g"]] == ["g/e0", "g/e2"]
    assert feeder.state.offsets == {(TOPIC, 0): 3}
    assert feeder.arrive(bad(faulty)) == [Dropped(("g/e1",), Why.DUPLICATE, "g")]  # accounted for once


def test_without_a_control_state_or_a_rule_every_trajectory_is_trainable() -> None:
    for control in (None, ControlState(RUN), fold(RUN, [pinned(hold=False)])):
        feeder = Feeder(control)
        decisions = [d for t in graded_group("g", [1.0, 0.0, 0.5]) for d in feeder.arrive(t)]
        assert [type(d) for d in decisions] == [Ready]
        assert feeder.state.held == {}


def test_an_unvouched_grade_is_held_then_joins_its_group_once_its_grader_is_cleared() -> None:
    feeder = Feeder(HOLDING)
    members = graded_group("g", [1.0, 0.0, 0.5])
    for member in members:
        assert feeder.arrive(member) == []
    assert list(feeder.state.held) == ["g/e0", "g/e1", "g/e2"] and feeder.state.pending == {}
    assert feeder.state.counters.held == 3 and feeder.state.waiting == 3
    assert feeder.control(cleared(GRADED_AT - 1)) == []  # cleared, but not up to their grade time
    [ready] = feeder.control(cleared(GRADED_AT))
    assert isinstance(ready, Ready)
    assert [m.episode_id for m in ready.group.members] == ["g/e0", "g/e1", "g/e2"]  # in arrival order
    assert feeder.state.held == {} and feeder.state.ready == (ready.group,)


def test_a_held_trajectory_is_checked_for_staleness_when_released() -> None:
    feeder = Feeder(HOLDING, PlannerConfig(group_size=2, group_timeout_s=10.0, max_staleness=1))
    feeder.arrive(graded(testing.trajectory(episode_id="old", group_id="slow", policy_version=0)))
    feeder.control(cleared(GRADED_AT))  # nothing else held: the version-0 one now waits in its group
    assert list(feeder.state.pending) == ["slow"]
    feeder.state = PlannerState(version=0, control=feeder.state.control)
    feeder.arrive(
        graded(testing.trajectory(episode_id="held", group_id="h", policy_version=0), at_us=GRADED_AT + 5)
    )
    for key in ("a", "b"):
        for member in graded_group(key, [1.0, 0.0]):
            feeder.arrive(member)
        feeder.feed(Trained((key,)))
    assert feeder.state.version == 2 and "held" in feeder.state.held  # held: not aged out silently
    assert feeder.control(cleared(GRADED_AT + 5)) == [Dropped(("held",), Why.STALE, "h")]
    assert feeder.state.counters.stale == 1 and feeder.state.held == {}


def test_a_held_trajectory_whose_group_closed_meanwhile_is_late_when_released() -> None:
    feeder = Feeder(HOLDING, PlannerConfig(group_size=2, group_timeout_s=10.0, max_staleness=1))
    a, b, c = graded_group("g", [1.0, 0.0, 0.5])
    feeder.arrive(a)
    feeder.arrive(b)
    feeder.control(cleared(GRADED_AT))
    assert [g.group_key for g in feeder.state.ready] == ["g"]
    late = graded(c, at_us=GRADED_AT + 1)
    feeder.arrive(late)
    assert feeder.state.counters.late == 1 and feeder.state.held == {}  # late at once: never held


def test_a_rule_quarantines_held_trajectories() -> None:
    feeder = Feeder(HOLDING)
    for member in graded_group("g", [1.0, 0.0, 0.5]):
        feeder.arrive(member)
    dropped = feeder.control(by_ids("g/e1"), cleared(GRADED_AT))
    assert dropped[0] == Dropped(("g/e1",), Why.QUARANTINED, "g")
    assert [m.episode_id for m in feeder.state.pending["g"]] == ["g/e0", "g/e2"]  # the rest released
    assert feeder.state.counters.quarantined == 1 and feeder.state.held == {}


def test_a_rule_takes_members_out_of_a_pending_group_which_may_still_fill() -> None:
    feeder = Feeder(ControlState(RUN))
    a, b, c, d = graded_group("g", [1.0, 0.0, 0.5, 0.0])
    feeder.arrive(bad(a))
    feeder.arrive(b)
    assert feeder.control(rule(Component.IMAGE.value, BAD_IMAGE)) == [
        Dropped(("g/e0",), Why.QUARANTINED, "g")
    ]
    assert [m.episode_id for m in feeder.state.pending["g"]] == ["g/e1"]
    feeder.arrive(c)
    [ready] = feeder.arrive(d)
    assert isinstance(ready, Ready)
    assert [m.episode_id for m in ready.group.members] == ["g/e1", "g/e2", "g/e3"]


def test_a_pending_group_whose_members_are_all_quarantined_is_gone() -> None:
    feeder = Feeder(ControlState(RUN))
    feeder.arrive(graded(testing.trajectory(episode_id="x", group_id="g")))
    feeder.control(rule(Component.IMAGE.value, IMAGE))
    assert feeder.state.pending == {} and feeder.state.waiting == 0


def test_a_ready_group_that_loses_members_has_its_advantages_recomputed_from_the_rest() -> None:
    config = PlannerConfig(group_size=4, group_timeout_s=10.0, max_staleness=1)
    feeder = Feeder(ControlState(RUN), config)
    members = graded_group("g", [1.0, 0.0, 0.5, 0.0])
    for member in (members[0], bad(members[1]), members[2], members[3]):
        feeder.arrive(member)
    [before] = feeder.state.ready
    decisions = feeder.control(rule(Component.IMAGE.value, BAD_IMAGE))
    assert decisions[0] == Dropped(("g/e1",), Why.QUARANTINED, "g")
    [after] = feeder.state.ready
    assert [m.episode_id for m in after.members] == ["g/e0", "g/e2", "g/e3"]
    assert list(after.advantages) == group_advantages([1.0, 0.5, 0.0]) != list(before.advantages[::1])
    assert after.partial and decisions[1] == Ready(after)
    feeder.feed(Trained(("g",)))
    assert feeder.state.counters.trained == 3 and feeder.state.counters.quarantined == 1


def test_a_ready_group_left_with_one_member_or_equal_rewards_is_skipped() -> None:
    feeder = Feeder(ControlState(RUN))
    one = graded_group("one", [1.0, 0.0, 0.0])
    for member in (one[0], bad(one[1]), bad(one[2])):
        feeder.arrive(member)
    equal = graded_group("equal", [1.0, 0.0, 0.0])
    for member in (bad(equal[0]), equal[1], equal[2]):
        feeder.arrive(member)
    assert [g.group_key for g in feeder.state.ready] == ["one", "equal"]
    decisions = feeder.control(rule(Component.IMAGE.value, BAD_IMAGE))
    assert decisions == [
        Dropped(("one/e1", "one/e2"), Why.QUARANTINED, "one"),
        Dropped(("one/e0",), Why.UNPAIRED, "one"),
        Dropped(("equal/e0",), Why.QUARANTINED, "equal"),
        Dropped(("equal/e1", "equal/e2"), Why.ALL_EQUAL, "equal"),
    ]
    counters = feeder.state.counters
    assert (counters.quarantined, counters.unpaired, counters.all_equal) == (3, 1, 2)
    assert feeder.state.ready == () and next_step(feeder.state, CONFIG) == ()


def test_an_unchanged_control_state_changes_nothing() -> None:
    feeder = Feeder(fold(RUN, [by_ids("nobody")]))
    for member in graded_group("g", [1.0, 0.0, 0.5]):
        feeder.arrive(member)
    before = feeder.state
    assert feeder.feed(Control(before.control or ControlState(RUN))) == []
    assert (feeder.state.ready, feeder.state.counters) == (before.ready, before.counters)


def _train(feeder: Feeder, trained: list[Arrival], after_rule: list[Arrival]) -> None:
    step = next_step(feeder.state, CONFIG)
    members = [m for g in step for m in g.members]
    trained.extend(members)
    if feeder.state.control is not None and feeder.state.control.rules:
        after_rule.extend(members)
    feeder.feed(Trained(tuple(g.group_key for g in step)))


def test_a_quarantined_trajectory_is_never_trained_on_once_its_rule_has_come() -> None:
    """Random arrivals, clearances, training steps and one rule at a random moment: every trajectory is
    accounted for exactly once, and none the rule matches is in a training step taken after it came (one
    trained before it is history: the log of versions says which)."""
    totals = {"quarantined": 0, "trained_after_rule": 0, "held": 0}
    for seed in range(40):
        rng = random.Random(seed)
        feeder = Feeder(HOLDING if rng.random() < 0.5 else ControlState(RUN))
        trajectories = []
        for g in range(6):
            for t in graded_group(f"g{g}", [rng.choice([0.0, 0.5, 1.0]) for _ in range(3)]):
                trajectories.append(bad(t) if rng.random() < 0.3 else t)
        rng.shuffle(trajectories)
        rule_at = rng.randrange(len(trajectories) + 1)
        the_rule = rule(Component.IMAGE.value, BAD_IMAGE) if rng.random() < 0.5 else by_ids("g1/e0", "g2/e1")
        trained: list[Arrival] = []
        after_rule: list[Arrival] = []

        for index, trajectory in enumerate(trajectories):
            if index == rule_at:
                feeder.control(the_rule)
            feeder.arrive(trajectory)
            if rng.random() < 0.3:
                feeder.control(cleared(GRADED_AT))
            while feeder.state.ready and rng.random() < 0.5:
                _train(feeder, trained, after_rule)
        if rule_at == len(trajectories):
            feeder.control(the_rule)
        feeder.control(cleared(GRADED_AT))
        while feeder.state.ready:
            _train(feeder, trained, after_rule)
        control = feeder.state.control
        assert control is not None
        assert not [m for m in after_rule if control.quarantine_rule(m.trajectory) is not None], seed
        c = feeder.state.counters
        accounted = c.trained + c.stale + c.all_equal + c.timeout + c.late + c.quarantined + c.unpaired
        assert accounted + feeder.state.waiting == c.arrived == len(trajectories), seed
        assert c.trained == len(trained)
        totals["quarantined"] += c.quarantined
        totals["trained_after_rule"] += len(after_rule)
        totals["held"] += c.held
    assert all(totals.values()), totals  # the cases the assertions are about did happen
