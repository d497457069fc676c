"""Step-by-step comparison of a re-executed episode with its log (`ops.reproduce`), with a stand-in runner."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from actors.tasks.reward import Verdict as GradeVerdict
from ops.reproduce import Observation, StepFn, compare_observations, reproduce
from ops.runlog import LoggedRun
from sandbox_agent.limits import ExecLimits, SandboxSpec
from sandbox_agent.results import ExecResult, StepResult
from schemas.actions import RunCommand, SandboxAction
from schemas.budget import fit_text, stream_limit
from schemas.common import EpisodeConfig, Output
from schemas.events import StepExecuted
from tests.unit.ops.test_audit import Episode, RunLog, healthy_run
from tests.unit.ops.test_recheck import Grader, Tasks

SAME = Observation(0, False, False, "ok\n", "", "snap-1")


def test_identical_observations_do_not_diverge() -> None:
    assert compare_observations(SAME, SAME) == []


def test_each_differing_part_of_an_observation_says_why() -> None:
    other = Observation(1, True, False, "ok\nbut then\n", "warn", "snap-2")
    why = compare_observations(SAME, other)
    assert why[0] == "exit code: recorded 0, reproduced 1"
    assert why[1] == "timed out: recorded False, reproduced True"
    assert why[2] == "stdout differs from character 3: recorded '', reproduced 'but then\\n'"
    assert why[3] == "stderr differs from character 0: recorded '', reproduced 'warn'"
    assert why[4].startswith("snapshot id: recorded snap-1, reproduced snap-2")


class Runner:
    """Answers each command as the healthy log recorded it ("ok", a snapshot per step), except `odd`."""

    def __init__(self, episode: str, odd: str = "") -> None:
        self.episode = episode
        self.odd = odd
        self.sessions: list[tuple[str, str | None, ExecLimits]] = []
        self.step_limits: list[ExecLimits] = []

    @contextmanager
    def session(self, spec: SandboxSpec, snapshot_id: str | None, limits: ExecLimits) -> Iterator[StepFn]:
        self.sessions.append((spec.image, snapshot_id, limits))
        steps = iter(range(100))

        def execute(action: SandboxAction, step_limits: ExecLimits) -> StepResult:
            self.step_limits.append(step_limits)
            step = next(steps)
            assert isinstance(action, RunCommand)
            out = "not ok\n" if action.command == self.odd else "ok\n"
            return StepResult(ExecResult(0, out, ""), f"snap-{self.episode}-{step}-1")

        yield execute


def test_an_honest_episode_reproduces_step_by_step_and_reward() -> None:
    run = LoggedRun.collect(healthy_run(2).records)
    runner, grader = Runner("ep-1"), Grader()
    result = reproduce(run, run.episodes["ep-1"], Tasks(), runner, grader)
    assert result.same and result.first_divergence is None, result.table()
    assert [check.step for check in result.steps] == [0, 1, 2]
    assert result.steps[2].action == "submit" and result.steps[2].reproduced is None
    assert grader.graded == [("snap-ep-1-1-1", "trialog/task-hello:1")]  # the reproduced final workspace
    assert result.reward is not None and result.reward.reproduced == 1.0
    (image, restored, limits) = runner.sessions[0]
    assert image == "trialog/task-hello:1" and restored is None  # the log's initial snapshot (none here)
    assert limits.output_bytes > 0
    assert result.to_json()["first_divergent_step"] is None


def test_the_first_divergent_step_is_named_with_why() -> None:
    run = LoggedRun.collect(healthy_run(1).records)
    result = reproduce(run, run.episodes["ep-0"], Tasks(), Runner("ep-0", odd="make"), Grader())
    assert not result.same
    first = result.first_divergence
    assert first is not None and first.step == 1 and first.action == "run: make"
    assert "stdout differs from character 0" in first.why[0]
    assert result.verdict().startswith("diverges at step 1 (run: make): stdout differs")
    assert result.to_json()["first_divergent_step"] == 1


def test_a_final_reward_that_differs_is_a_divergence() -> None:
    run = LoggedRun.collect(healthy_run(1).records)
    result = reproduce(run, run.episodes["ep-0"], Tasks(), Runner("ep-0"), Grader(0.0, GradeVerdict.FAIL, 0))
    assert not result.same and result.first_divergence is None
    assert result.reward is not None and result.reward.why == (
        "reward: recorded 1, reproduced 0",
        "verdict: recorded pass, reproduced fail",
    )
    assert result.verdict().startswith("the final reward diverges")


def test_each_step_runs_with_the_inline_limit_the_owner_gave_it() -> None:
    """Past the episode's inline output budget a step keeps less inline (`schemas.budget`): a reproduction
    runs each step with the limit the run gave it and fits the output the same way, or every long step of a
    long episode would differ."""
    log = RunLog()
    episode = Episode(log, "ep-1").start()
    loud = "x" * (40 * 1024)
    for _ in range(14):  # 16 KiB each: past 160 KiB the budget's share is below the configured limit
        episode.step("yes")
    # Rewrite the recorded steps as a real owner would have logged them: each stream fitted to its limit.
    run = LoggedRun.collect(log.records)
    recorded = run.episodes["ep-1"]
    limits: list[int] = []
    used = 0
    for index, entry in enumerate(recorded.events):
        if isinstance(entry.event, StepExecuted):
            limit = stream_limit(EpisodeConfig(max_steps=16).output_limit_bytes, used)
            limits.append(limit)
            out = Output(fit_text(loud, limit), True, len(loud), None)
            recorded.events[index] = dataclasses.replace(
                entry, event=dataclasses.replace(entry.event, stdout=out)
            )
            used += len(out.text.encode()) + len(entry.event.stderr.text.encode())

    class Loud(Runner):
        @contextmanager
        def session(self, spec: SandboxSpec, snapshot_id: str | None, limits: ExecLimits) -> Iterator[StepFn]:
            with super().session(spec, snapshot_id, limits) as execute:

                def loud_execute(action: SandboxAction, step_limits: ExecLimits) -> StepResult:
                    step = execute(action, step_limits)
                    return dataclasses.replace(step, result=dataclasses.replace(step.result, stdout=loud))

                yield loud_execute

    runner = Loud("ep-1")
    result = reproduce(run, recorded, Tasks(), runner, Grader())
    assert [limit.output_bytes for limit in runner.step_limits] == limits
    assert limits[0] > limits[-1]  # the budget was spent: later steps kept less
    assert all(check.why == () or "snapshot" in " ".join(check.why) for check in result.steps), result.table()
