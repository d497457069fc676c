"""Difficulty buckets and the scheduler's draw by them: edges, weights, retirement, retests, versions."""

from __future__ import annotations

import argparse
import dataclasses
import random
from collections import Counter

import pytest

from actors.scheduler.core import (
    DrawReason,
    SchedulerState,
    Target,
    TaskRef,
    decide,
    draw_group,
    group_task,
    progress,
)
from actors.scheduler.difficulty import Bucket, BucketWeights, Tally, bucket_of, tally
from ops.cli.workers.scheduler import register, target_of
from schemas.codec import default_codec
from schemas.common import FailureClass, Producer, RecordMeta, Verdict
from schemas.difficulty import TaskDifficulty, difficulty_key
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from tests.unit.actors.requests import fixed_origin, request_meta
from tests.unit.actors.test_scheduler import _send, _state

RUN = "run-test"


def _measured(task_id: str, passes: int, samples: int = 4, version: str | None = None) -> TaskDifficulty:
    rate = passes / samples if samples else 0.0
    bucket = bucket_of(rate).value if samples else Bucket.UNMEASURED.value
    meta = RecordMeta(f"dif-{task_id}-{passes}", 1, Producer("tasks", "t"))
    return TaskDifficulty(
        meta, task_id, version or f"v-{task_id}", 3, samples, passes, rate, bucket, "difficulty-x"
    )


def _with(state: SchedulerState, *measured: TaskDifficulty) -> SchedulerState:
    for record in measured:
        state.observe_difficulty(record)
    return state


def _draws(state: SchedulerState, target: Target, groups: int) -> Counter[str]:
    return Counter(draw_group(target, g, state.tasks, state.difficulties).task.task_id for g in range(groups))


# -- buckets -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "bucket"),
    [
        (0.0, Bucket.NEVER),
        (0.01, Bucket.HARD),
        (1 / 3, Bucket.HARD),
        (0.34, Bucket.MEDIUM),
        (0.5, Bucket.MEDIUM),
        (2 / 3, Bucket.MEDIUM),
        (0.67, Bucket.EASY),
        (0.99, Bucket.EASY),
        (1.0, Bucket.ALWAYS),
    ],
)
def test_a_pass_rate_falls_in_its_bucket(rate: float, bucket: Bucket) -> None:
    assert bucket_of(rate) is bucket


@pytest.mark.parametrize("rate", [-0.1, 1.5, float("nan")])
def test_a_pass_rate_outside_zero_one_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        bucket_of(rate)


def test_bucket_weights_parse_keep_defaults_and_refuse_nonsense() -> None:
    weights = BucketWeights.parse("hard=3, easy=0.5")
    assert weights == BucketWeights(hard=3.0, medium=2.0, easy=0.5, unmeasured=1.0)
    assert BucketWeights.parse(weights.text()) == weights
    for text, said in [
        ("hard", "not BUCKET=WEIGHT"),
        ("tricky=1", "unknown bucket 'tricky'"),
        ("always=1", "retired"),
        ("hard=x", "not a number"),
        ("hard=-1", ">= 0"),
        ("hard=nan", ">= 0"),
        ("hard=1,hard=2", "twice"),
    ]:
        with pytest.raises(ValueError, match=said):
            BucketWeights.parse(text)


def test_the_command_line_takes_weights_and_retests_and_says_what_is_wrong(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="worker"))
    args = parser.parse_args(
        ["scheduler", "--episodes", "4", "--bucket-weights", "hard=2,medium=1", "--retest-every", "5"]
    )
    target = target_of(args, "r")
    assert target.bucket_weights == BucketWeights(hard=2.0, medium=1.0) and target.retest_every == 5
    assert target_of(parser.parse_args(["scheduler", "--episodes", "1"]), "r").retest_every == 10
    with pytest.raises(SystemExit):
        parser.parse_args(["scheduler", "--episodes", "4", "--bucket-weights", "never=1"])
    assert "retired" in capsys.readouterr().err


# -- the draw ------------------------------------------------------------------------------------------


def test_unmeasured_tasks_draw_exactly_as_before_difficulties_existed() -> None:
    state, target = _state(*(f"t{i}" for i in range(5))), Target(RUN, 1, seed=11)
    ids = sorted(state.tasks)
    for group in range(50):
        before = ids[random.Random(f"{target.seed}:group:{group}").choice(range(len(ids)))]
        assert group_task(target, group, state.tasks, state.difficulties).task_id == before
    # A measurement of another version of a task leaves it unmeasured: still the same draw.
    _with(state, _measured("t0", 4, version="old"), _measured("t1", 0, version="old"))
    assert state.bucket(state.tasks["t0"]) is Bucket.UNMEASURED and state.retired() == []
    assert _draws(state, target, 50) == _draws(_state(*ids), target, 50)


def test_groups_draw_buckets_by_weight_then_tasks_uniformly_within() -> None:
    # Two hard tasks, one medium, one easy, one unmeasured; weights hard 4, medium 2, easy 1, unmeasured 1.
    state = _with(
        _state("h1", "h2", "m", "e", "u"),
        _measured("h1", 1),
        _measured("h2", 1),
        _measured("m", 2),
        _measured("e", 3),
    )
    target = Target(RUN, 1, seed=5, bucket_weights=BucketWeights(4, 2, 1, 1), retest_every=0)
    groups = 8000
    counts = _draws(state, target, groups)
    share = {task: n / groups for task, n in counts.items()}
    expected = {"h1": 0.25, "h2": 0.25, "m": 0.25, "e": 0.125, "u": 0.125}
    assert share.keys() == expected.keys()
    for task, want in expected.items():
        assert share[task] == pytest.approx(want, abs=0.025), (task, share)
    # Deterministic for (seed, group), whatever order the tasks and measurements arrived in.
    shuffled = _with(
        _state("u", "e", "m", "h2", "h1"),
        _measured("e", 3),
        _measured("m", 2),
        _measured("h2", 1),
        _measured("h1", 1),
    )
    assert [draw_group(target, g, shuffled.tasks, shuffled.difficulties) for g in range(200)] == [
        draw_group(target, g, state.tasks, state.difficulties) for g in range(200)
    ]
    assert _draws(state, dataclasses.replace(target, seed=6), 200) != _draws(state, target, 200)


def test_a_zero_weight_bucket_is_not_drawn_unless_nothing_else_is_left() -> None:
    state = _with(_state("e", "m"), _measured("e", 3), _measured("m", 2))
    target = Target(RUN, 1, bucket_weights=BucketWeights.parse("easy=0"), retest_every=0)
    assert set(_draws(state, target, 100)) == {"m"}
    only_easy = _with(_state("e"), _measured("e", 3))
    (draw,) = {draw_group(target, g, only_easy.tasks, only_easy.difficulties) for g in range(10)}
    assert draw.task.task_id == "e" and draw.reason is DrawReason.ZERO_WEIGHTS


def test_retired_tasks_are_drawn_only_on_retest_groups() -> None:
    state = _with(
        _state("solved", "unsolvable", "a", "b"), _measured("solved", 4), _measured("unsolvable", 0)
    )
    assert state.retired() == ["solved", "unsolvable"]
    target = Target(RUN, 1, seed=2, retest_every=4)
    draws = [draw_group(target, g, state.tasks, state.difficulties) for g in range(400)]
    for group, draw in enumerate(draws):
        if (group + 1) % 4 == 0:
            assert draw.reason is DrawReason.RETEST and draw.task.task_id in {"solved", "unsolvable"}
            assert draw.bucket in {Bucket.ALWAYS, Bucket.NEVER}
        else:
            assert draw.reason is DrawReason.WEIGHTED and draw.task.task_id in {"a", "b"}
    assert {d.task.task_id for d in draws[3::4]} == {"solved", "unsolvable"}  # both come back
    never = dataclasses.replace(target, retest_every=0)
    assert set(_draws(state, never, 400)) == {"a", "b"}


def test_a_new_task_version_is_unmeasured_and_drawn_again() -> None:
    state = _with(_state("solved", "a"), _measured("solved", 4))
    target = Target(RUN, 1, retest_every=0)
    assert set(_draws(state, target, 100)) == {"a"}
    state.tasks["solved"] = TaskRef("solved", "v-new", "img")  # republished: another version
    assert state.bucket(state.tasks["solved"]) is Bucket.UNMEASURED
    assert set(_draws(state, target, 100)) == {"a", "solved"}


def test_the_newest_measurement_of_a_version_wins() -> None:
    state = _with(_state("t", "a"), _measured("t", 4))
    assert state.retired() == ["t"]
    state.observe_difficulty(_measured("t", 2))  # measured again (a newer policy): now medium
    assert state.bucket(state.tasks["t"]) is Bucket.MEDIUM and state.retired() == []


def test_when_every_task_is_retired_the_retired_are_drawn_rather_than_stalling() -> None:
    state = _with(_state("x", "y"), _measured("x", 4), _measured("y", 0))
    target = Target(RUN, 6, group_size=2, capacity=6, retest_every=0)
    draws = {draw_group(target, g, state.tasks, state.difficulties).reason for g in range(20)}
    assert draws == {DrawReason.ALL_RETIRED}
    commands = decide(state, target, fixed_origin("scheduler"))
    assert len(commands) == 6
    _send(state, commands)
    line = progress(state, target)
    assert "retired tasks 2/2, groups on retired tasks 3" in line
    assert "every task is retired: drawing them anyway" in line


def test_every_start_carries_its_tasks_version_and_progress_counts_retests() -> None:
    state = _with(_state("solved", "a", "b"), _measured("solved", 4), _measured("a", 1))
    target = Target(RUN, 40, group_size=2, capacity=40, retest_every=5)
    commands = decide(state, target, fixed_origin("scheduler"))
    _send(state, commands)
    assert {(c.task_id, c.task_version) for c in commands} <= {
        ("solved", "v-solved"),
        ("a", "v-a"),
        ("b", "v-b"),
    }
    assert all(c.task_version == state.tasks[c.task_id].task_version for c in commands)
    on_solved = {c.group_id for c in commands if c.task_id == "solved"}
    assert on_solved == {target.group_id(g) for g in (4, 9, 14, 19)}  # the retest groups, only them
    assert "retired tasks 1/3, groups on retired tasks 4" in progress(state, target)
    assert "retired" not in progress(_state("a"), target)  # nothing measured: the line as before


def test_a_target_refuses_a_negative_retest_period() -> None:
    with pytest.raises(ValueError, match="retest"):
        Target(RUN, 1, retest_every=-1)


# -- the record and the tally --------------------------------------------------------------------------


def test_a_difficulty_record_round_trips_and_is_keyed_apart_from_its_task() -> None:
    record = _measured("easy-fix-add", 3)
    codec = default_codec()
    assert codec.decode(codec.encode(record)) == record
    assert difficulty_key("easy-fix-add") == b"difficulty/easy-fix-add" != b"easy-fix-add"


def _completed(episode: str, task: str, reward: float, run: str = RUN) -> TrajectoryCompleted:
    meta = dataclasses.replace(request_meta(episode=episode), run_id=run, task_id=task, task_version="v1")
    return TrajectoryCompleted(meta, "g", "Fix it.", (), reward, Verdict.PASS, 1, 1, 0, 0)


def _failed(episode: str, task: str) -> TrajectoryFailed:
    meta = dataclasses.replace(request_meta(episode=episode), run_id=RUN, task_id=task, task_version="v1")
    return TrajectoryFailed(meta, FailureClass.SANDBOX_CRASH, "lost", ())


def test_the_tally_counts_passes_among_graded_episodes_once_each() -> None:
    trajectories = [
        _completed("e1", "a", 1.0),
        _completed("e1", "a", 1.0),  # a second copy of the same episode
        _completed("e2", "a", 0.8),  # partial credit is not a pass
        _completed("e3", "a", -1.0),
        _failed("e4", "a"),  # no grade: not a sample
        _completed("e5", "b", 1.0),
        _completed("e6", "b", 1.0, run="other"),
        _failed("e7", "c"),
    ]
    counts = tally(trajectories, RUN)
    assert counts == {
        ("a", "v1"): Tally("a", "v1", samples=3, passes=1, unfinished=1),
        ("b", "v1"): Tally("b", "v1", samples=1, passes=1),
        ("c", "v1"): Tally("c", "v1", unfinished=1),
    }
    assert counts[("a", "v1")].bucket is Bucket.HARD and counts[("b", "v1")].bucket is Bucket.ALWAYS
    assert counts[("c", "v1")].bucket is Bucket.UNMEASURED and counts[("c", "v1")].pass_rate == 0.0
