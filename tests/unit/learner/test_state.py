from __future__ import annotations

import pytest

from learner import testing
from learner.state import (
    Arrival,
    Discarded,
    Dropped,
    PlannerConfig,
    PlannerState,
    Position,
    Ready,
    Tick,
    Trained,
    Unreadable,
    Why,
    apply,
    next_step,
)
from schemas.trajectories import TrajectoryCompleted

CONFIG = PlannerConfig(group_size=3, group_timeout_s=10.0, max_staleness=1)
TOPIC = "run-test.trajectories.completed"
SECOND = 1_000_000


class Feeder:
    """Feeds trajectories to the planner at increasing offsets of one partition."""

    def __init__(self, config: PlannerConfig = CONFIG) -> None:
        self.config = config
        self.state = PlannerState()
        self.offset = 0
        self.decisions: list[object] = []

    def arrive(self, trajectory: TrajectoryCompleted, at_s: float = 0.0, partition: int = 0) -> list[object]:
        position = Position(TOPIC, partition, self.offset)
        self.offset += 1
        return self.feed(Arrival(trajectory, position, int(at_s * SECOND)))

    def feed(self, event: object) -> list[object]:
        self.state, decisions = apply(self.state, event, self.config)  # type: ignore[arg-type]
        self.decisions += decisions
        return list(decisions)


def test_a_full_group_with_different_rewards_becomes_ready_with_its_advantages() -> None:
    feeder = Feeder()
    members = testing.group("g1", [1.0, 0.0, 0.0])
    assert feeder.arrive(members[0]) == []
    assert feeder.arrive(members[1]) == []
    [ready] = feeder.arrive(members[2])
    assert isinstance(ready, Ready)
    assert [m.episode_id for m in ready.group.members] == ["g1/e0", "g1/e1", "g1/e2"]
    assert ready.group.advantages[0] > 0 > ready.group.advantages[1] == ready.group.advantages[2]
    assert not ready.group.partial
    assert feeder.state.pending == {}
    assert feeder.state.ready == (ready.group,)
    assert feeder.state.offsets == {(TOPIC, 0): 3}
    assert feeder.state.waiting == 3


def test_training_a_ready_group_advances_the_version_and_counts_its_trajectories() -> None:
    feeder = Feeder()
    for member in testing.group("g1", [1.0, 0.0, 0.5]):
        feeder.arrive(member)
    feeder.feed(Trained(("g1",)))
    assert feeder.state.version == 1
    assert feeder.state.ready == ()
    assert feeder.state.counters.trained == 3
    assert feeder.state.counters.steps == 1


def test_a_group_with_all_equal_rewards_is_skipped_and_counted() -> None:
    feeder = Feeder()
    for member in testing.group("g1", [0.5, 0.5, 0.5]):
        feeder.arrive(member)
    assert feeder.decisions == [Dropped(("g1/e0", "g1/e1", "g1/e2"), Why.ALL_EQUAL, "g1")]
    assert feeder.state.ready == ()
    assert feeder.state.counters.all_equal == 3
    assert feeder.state.waiting == 0


def test_a_trajectory_older_than_max_staleness_is_dropped_on_arrival() -> None:
    feeder = Feeder()
    feeder.state = PlannerState(version=3)
    fresh = testing.trajectory(episode_id="fresh", group_id="g", policy_version=2)
    stale = testing.trajectory(episode_id="stale", group_id="g", policy_version=1)
    assert feeder.arrive(fresh) == []
    assert feeder.arrive(stale) == [Dropped(("stale",), Why.STALE, "g")]
    assert feeder.state.counters.stale == 1
    assert [m.episode_id for m in feeder.state.pending["g"]] == ["fresh"]
    assert feeder.state.offsets == {(TOPIC, 0): 2}  # a dropped record is consumed all the same


def test_a_new_version_drops_waiting_members_that_became_too_old() -> None:
    feeder = Feeder()
    waiting = testing.trajectory(episode_id="old", group_id="slow", policy_version=0)
    feeder.arrive(waiting)
    for member in testing.group("g1", [1.0, 0.0, 0.0], policy_version=0):
        feeder.arrive(member)
    feeder.feed(Trained(("g1",)))  # version 1: a version-0 trajectory is 1 version old, still allowed
    assert "slow" in feeder.state.pending
    for member in testing.group("g2", [1.0, 0.0, 0.0], policy_version=1):
        feeder.arrive(member)
    dropped = feeder.feed(Trained(("g2",)))  # version 2: now 2 versions old
    assert dropped == [Dropped(("old",), Why.STALE, "slow")]
    assert "slow" not in feeder.state.pending
    assert feeder.state.counters.stale == 1


def test_an_incomplete_group_with_different_rewards_is_trained_at_its_timeout() -> None:
    feeder = Feeder()
    a, b, _ = testing.group("g1", [1.0, 0.0, 0.0])
    feeder.arrive(a, at_s=100.0)
    feeder.arrive(b, at_s=105.0)
    assert feeder.feed(Tick(109 * SECOND)) == []  # 9 s after its first member: not yet
    [ready] = feeder.feed(Tick(110 * SECOND))
    assert isinstance(ready, Ready)
    assert ready.group.partial
    assert len(ready.group.members) == 2
    feeder.feed(Trained(("g1",)))
    assert feeder.state.counters.partial_steps == 1


def test_an_incomplete_group_with_nothing_to_compare_is_skipped_at_its_timeout() -> None:
    feeder = Feeder()
    lone = testing.trajectory(episode_id="lone", group_id="g-lone", reward=1.0)
    a, b, _ = testing.group("g-equal", [0.0, 0.0, 1.0])
    feeder.arrive(lone, at_s=0.0)
    feeder.arrive(a, at_s=1.0)
    feeder.arrive(b, at_s=1.0)
    decisions = feeder.feed(Tick(11 * SECOND))
    assert decisions == [
        Dropped(("lone",), Why.TIMEOUT, "g-lone"),
        Dropped(("g-equal/e0", "g-equal/e1"), Why.ALL_EQUAL, "g-equal"),
    ]
    assert feeder.state.counters.timeout == 1
    assert feeder.state.counters.all_equal == 2
    assert feeder.state.pending == {}


def test_late_members_and_duplicates_are_counted_not_learned_from() -> None:
    feeder = Feeder()
    members = testing.group("g1", [1.0, 0.0, 0.0, 1.0])
    for member in members[:3]:
        feeder.arrive(member)
    assert feeder.arrive(members[1]) == [Dropped(("g1/e1",), Why.DUPLICATE, "g1")]
    assert feeder.arrive(members[3]) == [Dropped(("g1/e3",), Why.LATE, "g1")]
    assert feeder.state.counters.duplicate == 1
    assert feeder.state.counters.late == 1
    assert feeder.state.counters.arrived == 4


def test_offsets_follow_each_partition_and_unreadable_records_count() -> None:
    feeder = Feeder()
    feeder.feed(Unreadable(Position(TOPIC, 2, 41)))
    feeder.feed(Arrival(testing.trajectory(episode_id="x", group_id="g"), Position(TOPIC, 5, 7), 0))
    feeder.feed(Unreadable(Position(TOPIC, 2, 10)))  # below the known offset: no going back
    assert feeder.state.offsets == {(TOPIC, 2): 42, (TOPIC, 5): 8}
    assert feeder.state.counters.unreadable == 2


def test_a_discarded_group_leaves_without_a_new_version() -> None:
    feeder = Feeder()
    for member in testing.group("g1", [1.0, 0.0, 0.0]):
        feeder.arrive(member)
    feeder.feed(Discarded("g1"))
    assert feeder.state.version == 0
    assert feeder.state.ready == ()
    assert feeder.state.counters.unusable == 3


def test_the_planner_is_pure() -> None:
    trajectory = testing.trajectory(episode_id="x", group_id="g")
    event = Arrival(trajectory, Position(TOPIC, 0, 0), 0)
    before = PlannerState()
    first = apply(before, event, CONFIG)
    second = apply(before, event, CONFIG)
    assert first == second
    assert before == PlannerState()


def test_one_step_on_several_ready_groups_advances_the_version_once() -> None:
    config = PlannerConfig(group_size=2, group_timeout_s=10.0, max_staleness=1, groups_per_step=2)
    feeder = Feeder(config)
    for key in ("g1", "g2", "g3"):
        for member in testing.group(key, [1.0, 0.0]):
            feeder.arrive(member)
    step = next_step(feeder.state, config)
    assert [g.group_key for g in step] == ["g1", "g2"]  # the oldest, up to groups_per_step
    feeder.feed(Trained(("g1", "g2")))
    assert feeder.state.version == 1
    assert [g.group_key for g in feeder.state.ready] == ["g3"]
    assert (feeder.state.counters.trained, feeder.state.counters.steps) == (4, 1)
    assert [g.group_key for g in next_step(feeder.state, config)] == ["g3"]


def test_a_step_names_distinct_ready_groups() -> None:
    with pytest.raises(ValueError):
        Trained(())
    with pytest.raises(ValueError):
        Trained(("g1", "g1"))
    with pytest.raises(ValueError):
        PlannerConfig(groups_per_step=0)
    feeder = Feeder()
    with pytest.raises(ValueError, match="not ready"):
        feeder.feed(Trained(("nope",)))
