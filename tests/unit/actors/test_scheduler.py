"""The scheduler's pure core: backpressure, the episode cap, groups, deterministic draws, restarts."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib

import pytest

from actors.scheduler.core import SchedulerState, Target, decide, episode_seed, progress
from ops.cli.workers.scheduler import register, target_of
from schemas.blobs import BlobRef
from schemas.codec import default_codec
from schemas.commands import StartEpisode
from schemas.common import FailureClass, Producer, RecordMeta, Verdict
from schemas.publications import TaskPublished
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from tests.unit.actors.requests import fixed_origin, request_meta

RUN = "run-test"


def _task(task_id: str) -> TaskPublished:
    meta = RecordMeta(f"pub-{task_id}", 1, Producer("tasks", "t"))
    bundle = BlobRef(hashlib.sha256(task_id.encode()).hexdigest(), 1)
    return TaskPublished(meta, task_id, f"v-{task_id}", "Fix it.", "img", 30.0, "pytest", None, (), bundle)


def _state(*task_ids: str) -> SchedulerState:
    state = SchedulerState()
    for task_id in task_ids:
        state.observe_task(_task(task_id))
    return state


def _send(state: SchedulerState, commands: list[StartEpisode]) -> None:
    for command in commands:
        assert state.observe_start(command, RUN)


def _completed(episode: str, reward: float = 1.0, run: str = RUN) -> TrajectoryCompleted:
    meta = dataclasses.replace(request_meta(episode=episode), run_id=run)
    return TrajectoryCompleted(meta, "g", "Fix it.", (), reward, Verdict.PASS, 1, 1, 0, 0)


def _failed(episode: str) -> TrajectoryFailed:
    meta = dataclasses.replace(request_meta(episode=episode), run_id=RUN)
    return TrajectoryFailed(meta, FailureClass.STEP_LIMIT, "too long", ())


def test_nothing_starts_without_tasks() -> None:
    assert decide(SchedulerState(), Target(RUN, 4), fixed_origin("scheduler")) == []


def test_capacity_bounds_the_episodes_in_flight_and_ended_ones_free_slots() -> None:
    state, target, origin = _state("a", "b"), Target(RUN, 10, capacity=3), fixed_origin("scheduler")
    first = decide(state, target, origin)
    assert len(first) == 3
    _send(state, first)
    assert decide(state, target, origin) == []  # backpressure: the pipeline is full
    state.observe_trajectory(_completed(first[0].episode_id), RUN)
    state.observe_trajectory(_completed(first[0].episode_id), RUN)  # a second copy frees nothing more
    more = decide(state, target, origin)
    assert len(more) == 1 and state.in_flight == 2
    _send(state, more)
    state.observe_trajectory(_failed(first[1].episode_id), RUN)
    assert len(decide(state, target, origin)) == 1


def test_never_more_than_n_episodes_and_done_when_n_ended() -> None:
    state, target, origin = _state("a"), Target(RUN, 3, capacity=8), fixed_origin("scheduler")
    commands = decide(state, target, origin)
    assert len(commands) == 3
    _send(state, commands)
    assert decide(state, target, origin) == []
    for command in commands[:2]:
        state.observe_trajectory(_completed(command.episode_id), RUN)
    assert not state.done(target) and decide(state, target, origin) == []
    state.observe_trajectory(_failed(commands[2].episode_id), RUN)
    assert state.done(target)
    assert "ended 3/3 (completed 2, failed 1), in flight 0/8" in progress(state, target)


def test_commands_carry_the_run_task_config_and_distinct_ids_and_seeds() -> None:
    state, target = _state("a"), Target(RUN, 4, max_steps=5, policy_version=2)
    commands = decide(state, target, fixed_origin("scheduler"))
    assert {c.run_id for c in commands} == {RUN}
    assert {(c.task_id, c.task_version, c.image) for c in commands} == {("a", "v-a", "img")}
    assert {c.config.max_steps for c in commands} == {5} and {c.policy_version for c in commands} == {2}
    assert len({c.episode_id for c in commands}) == 4 and len({c.seed for c in commands}) == 4
    assert commands[0].episode_id == "w0-000002"  # ids from the injected IdSource (meta took the first)
    codec = default_codec()
    assert [codec.decode(codec.encode(c)) for c in commands] == commands


def test_groups_share_a_task_and_the_draw_is_deterministic() -> None:
    target = Target(RUN, 12, group_size=3, capacity=12, seed=42)
    tasks = [f"t{i}" for i in range(6)]
    first = decide(_state(*tasks), target, fixed_origin("scheduler"))
    again = decide(_state(*reversed(tasks)), target, fixed_origin("scheduler", "other"))
    assert [(c.group_id, c.task_id, c.seed) for c in first] == [
        (c.group_id, c.task_id, c.seed) for c in again
    ]
    groups: dict[str, set[str]] = {}
    for command in first:
        groups.setdefault(command.group_id, set()).add(command.task_id)
    assert len(groups) == 4 and all(len(ids) == 1 for ids in groups.values())
    assert len({c.task_id for c in first}) > 1  # 4 draws among 6 tasks (seed 42): not all the same
    other_seed = decide(_state(*tasks), dataclasses.replace(target, seed=7), fixed_origin("scheduler"))
    assert [c.task_id for c in other_seed] != [c.task_id for c in first]


def test_round_robin_gives_each_group_the_next_task_in_id_order() -> None:
    target = Target(RUN, 10, group_size=2, capacity=10, seed=3, round_robin=True)
    commands = decide(_state("c", "a", "b"), target, fixed_origin("scheduler"))
    assert [c.task_id for c in commands] == ["a", "a", "b", "b", "c", "c", "a", "a", "b", "b"]
    assert [c.seed for c in commands] == [episode_seed(target, i) for i in range(10)]


def test_a_restart_that_read_the_log_back_starts_nothing_extra_and_keeps_a_group_on_its_task() -> None:
    target = Target(RUN, 6, group_size=2, capacity=3, seed=1)
    state = _state("a", "b", "c")
    before = decide(state, target, fixed_origin("scheduler"))  # episodes 0, 1 (group 0), 2 (group 1)
    _send(state, before)
    state.observe_trajectory(_completed(before[0].episode_id), RUN)
    # The scheduler dies; a new one reads the tasks, its commands and the trajectories back.
    restarted = _state("a", "b", "c")
    for command in before:
        restarted.observe_start(command, RUN)
    restarted.observe_trajectory(_completed(before[0].episode_id), RUN)
    after = decide(restarted, target, fixed_origin("scheduler", "w1"))
    assert len(after) == 1  # 2 in flight, capacity 3
    assert after[0].group_id == before[2].group_id and after[0].task_id == before[2].task_id
    assert after[0].seed == episode_seed(target, 3)


def test_records_of_other_runs_are_ignored() -> None:
    state = _state("a")
    command = decide(state, Target("other-run", 1), fixed_origin("scheduler"))[0]
    assert not state.observe_start(command, RUN)
    assert not state.observe_trajectory(_completed("ep-x", run="other-run"), RUN)
    assert state.started == {} and state.ended == set()


@pytest.mark.parametrize("bad", [{"episodes": -1}, {"group_size": 0}, {"capacity": 0}, {"max_steps": 0}])
def test_a_target_refuses_nonsense(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Target(RUN, **{"episodes": 1, **bad})


def test_the_worker_command_parses_its_options() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="worker"))
    args = parser.parse_args(
        ["scheduler", "--run", "r1", "--episodes", "5", "--group-size", "2", "--seed", "9"]
    )
    target = target_of(args, args.run)
    assert target == Target("r1", 5, group_size=2, capacity=4, seed=9, max_steps=8)
    turns = parser.parse_args(["scheduler", "--episodes", "2", "--round-robin"])
    assert target_of(turns, turns.run).round_robin


# -- paused by the run's control log -------------------------------------------------------------------


def test_nothing_starts_while_the_run_is_paused_and_a_resume_lets_it_go_on() -> None:
    from actors.scheduler.core import pause_notice
    from tests.unit.actors.guard_records import paused, resumed

    state, target, origin = _state("a"), Target(RUN, 4, capacity=4), fixed_origin("scheduler")
    first = decide(state, target, origin)[:2]
    _send(state, first)
    assert pause_notice(False, state, target) is None  # nothing read from run.control yet
    pause = paused("canary c1 graded 1.0 instead of 0.0")
    state.observe_control(pause, RUN)
    assert decide(state, target, origin) == []
    assert pause_notice(False, state, target) == (
        f"paused: canary c1 graded 1.0 instead of 0.0; resume with trialog run resume {RUN}"
    )
    assert pause_notice(True, state, target) is None  # said once
    state.observe_trajectory(_completed(first[0].episode_id), RUN)  # in flight ones still end
    assert decide(state, target, origin) == []
    resume = resumed("verifier fixed")
    state.observe_control(resume, RUN)
    assert len(decide(state, target, origin)) == 2
    assert pause_notice(True, state, target) == "resumed: verifier fixed; starting episodes again"
    # The control log read back from its beginning (the worker's follow after its rebuild) changes nothing.
    state.observe_control(pause, RUN)
    assert not state.paused and len(decide(state, target, origin)) == 2


def test_another_runs_pause_does_not_pause_this_one() -> None:
    from tests.unit.actors.guard_records import paused

    state, target = _state("a"), Target(RUN, 2)
    state.observe_control(paused(run="other"), RUN)
    assert not state.paused and len(decide(state, target, fixed_origin("scheduler"))) == 2
