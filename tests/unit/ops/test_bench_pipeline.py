from __future__ import annotations

from ops.bench.pipeline import _percentile
from ops.bench.pipeline_workers import TASK_ID, TASK_VERSION, NullWorkers, start_commands
from schemas.actions import RunCommand, Submit
from schemas.common import Producer
from schemas.events import ActionProposed, RewardAssigned, StepExecuted
from schemas.requests import PolicyRequest, SamplingParams, SandboxRequest, VerifyRequest
from schemas.sources import FixedClock, Origin, SequentialIds


def _meta(step: int):  # type: ignore[no-untyped-def]
    origin = Origin(Producer("streams", "s"), FixedClock(), SequentialIds())
    return origin.event_meta(
        run_id="r", episode_id="e", task_id=TASK_ID, task_version=TASK_VERSION, step=step, attempt=2,
        policy_version=0, prev_hash="ab" * 32,
    )  # fmt: skip


def test_null_workers_answer_each_request_kind_with_its_key_echoed() -> None:
    workers = NullWorkers(steps=2)
    _, early = workers.answer(PolicyRequest(_meta(1), "t", (), SamplingParams()))
    _, last = workers.answer(PolicyRequest(_meta(2), "t", (), SamplingParams()))
    assert isinstance(early, ActionProposed) and early.action == RunCommand("true")
    assert isinstance(last, ActionProposed) and last.action == Submit()
    assert (last.meta.step, last.meta.attempt, last.meta.prev_hash) == (2, 2, "ab" * 32)
    topic, executed = workers.answer(SandboxRequest(_meta(1), "img", RunCommand("true"), 5.0, 100))
    assert topic == "sandbox.results" and isinstance(executed, StepExecuted) and executed.meta.snapshot_id
    topic, graded = workers.answer(VerifyRequest(_meta(3), "img", 5.0))
    assert topic == "verify.results" and isinstance(graded, RewardAssigned) and graded.reward == 1.0


def test_start_commands_are_distinct_episodes_of_the_bench_task() -> None:
    commands = start_commands("run-x", 3, steps=4)
    assert len({c.episode_id for c in commands}) == 3
    assert all(c.task_id == TASK_ID and c.config.max_steps == 5 for c in commands)


def test_percentile() -> None:
    assert _percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert _percentile([1.0, 2.0], 0.99) == 2.0
