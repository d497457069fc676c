from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pytest

from ops.bench.pipeline import Measures, Result, _loads, _percentile, _render, _summary, cpu_seconds
from ops.bench.pipeline_workers import TASK_ID, TASK_VERSION, NullWorkers, start_commands
from schemas.actions import RunCommand, Submit
from schemas.common import Producer
from schemas.events import ActionProposed, RewardAssigned, StepExecuted
from schemas.origin import FixedClock, Origin, SequentialIds
from schemas.requests import PolicyRequest, SamplingParams, SandboxRequest, VerifyRequest
from schemas.topics import SANDBOX_RESULTS, VERIFY_RESULTS


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
    assert topic is SANDBOX_RESULTS and isinstance(executed, StepExecuted) and executed.meta.snapshot_id
    topic, graded = workers.answer(VerifyRequest(_meta(3), "img", 5.0))
    assert topic is VERIFY_RESULTS and isinstance(graded, RewardAssigned) and graded.reward == 1.0


def test_start_commands_are_distinct_episodes_of_the_bench_task() -> None:
    commands = start_commands("run-x", 3, steps=4)
    assert len({c.episode_id for c in commands}) == 3
    assert all(c.task_id == TASK_ID and c.config.max_steps == 5 for c in commands)


def test_percentile() -> None:
    assert _percentile([5.0, 1.0, 3.0, 2.0, 4.0], 0.5) == 3.0
    assert _percentile([1.0, 2.0], 0.99) == 2.0


def test_cpu_seconds_of_a_process_grow_with_its_work() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) >= before + 0.03


def test_the_report_compares_the_baseline_with_this_checkout_under_each_load() -> None:
    fast = Result([1.0, 2.0, 3.0], steps=100, seconds=1.0, episodes_done=1, cpu_s=0.2, driver_cpu_s=0.1)
    faster = Result([40.0, 50.0, 60.0], steps=600, seconds=1.0, episodes_done=1, cpu_s=0.6)
    slow = Result([10.0, 20.0, 30.0], steps=100, seconds=10.0, episodes_done=1, cpu_s=1.0)
    assert _summary([fast, fast]) == (2.0, 3.0, 100.0, 2.0, 1.0, 6)
    measures = {
        "baseline": Measures([slow], {60: [slow], 200: [slow]}),
        "this checkout": Measures([fast], {60: [fast], 200: [faster]}),
    }
    args = argparse.Namespace(episodes=[60, 200], steps=8, baseline=Path("/base"), rounds=1)
    text = _render(args, measures, {"baseline": Path("/base"), "this checkout": Path("/here")})
    assert "| baseline | 60 in flight | 20.0 ms | 30.0 ms | 10 | 10.00 ms | 0.00 ms | 3 |" in text
    assert "| this checkout | 60 in flight | 2.0 ms | 3.0 ms | 100 | 2.00 ms | 1.00 ms | 3 |" in text
    assert "| this checkout | 200 in flight | 50.0 ms | 60.0 ms | 600 | 1.00 ms | 0.00 ms | 3 |" in text
    assert "--episodes 60,200 --steps 8 --baseline /base" in text
    assert "overhead per step (unloaded): p50 2.0 ms (target <= 20 ms: met), p99 3.0 ms" in text
    # The best rate of this checkout decides the throughput target, with the CPU per step there.
    assert (
        "throughput: 600 steps/s with 200 in flight (target >= 500: met); 100 with 60, 600 with 200" in text
    )
    assert "1.00 ms of CPU per step (at most 1000 steps/s on one core)" in text
    assert "200 in flight 50 ms (200 / 600 steps/s = 333 ms)" in text


def test_loads_are_a_comma_separated_list_of_episode_counts() -> None:
    assert _loads("200,60, 200") == [60, 200]
    for bad in ("", "0", "a,b", "60,-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            _loads(bad)
