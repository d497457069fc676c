"""`trialog tasks difficulty` without a broker: its values are checked first, and the measurement's tally
into records (per task version, the tasks asked for only)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ops.cli.main import main
from ops.paths import REPO_ROOT
from ops.task_difficulty import measurements, measuring_run
from schemas.common import Verdict
from schemas.trajectories import TrajectoryCompleted
from tests.unit.actors.requests import fixed_origin, request_meta

TASK = REPO_ROOT / "examples" / "tasks" / "easy-fix-add"


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--policy", "0"], "name the task folders"),
        ([str(TASK), "--policy", "0", "--run", "a", "--from-run", "b"], "give one"),
        (["/nonexistent-task-dir", "--policy", "0"], "nonexistent-task-dir"),
    ],
)
def test_bad_values_are_refused_before_any_service_is_touched(
    words: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tasks", "difficulty", *words, "--json", "--bootstrap", "127.0.0.1:1"]
    assert main(argv) == 2
    assert said in json.loads(capsys.readouterr().out)["error"]


def test_the_command_line_refuses_a_negative_version_and_zero_samples() -> None:
    assert main(["tasks", "difficulty", str(TASK), "--policy", "-1"]) == 2
    assert main(["tasks", "difficulty", str(TASK), "--policy", "1", "--samples", "0"]) == 2


def test_the_measuring_run_is_named_by_what_is_measured() -> None:
    one = measuring_run([("a", "v1"), ("b", "v2")], 3, 8)
    assert one == measuring_run([("b", "v2"), ("a", "v1")], 3, 8) and one.startswith("difficulty-")
    assert (
        len({one, measuring_run([("a", "v1")], 3, 8), measuring_run([("a", "v1"), ("b", "v2")], 4, 8)}) == 3
    )


def _trajectory(episode: str, task: str, version: str, reward: float) -> TrajectoryCompleted:
    meta = dataclasses.replace(request_meta(episode=episode), run_id="m", task_id=task, task_version=version)
    return TrajectoryCompleted(meta, "g", "Fix.", (), reward, Verdict.PASS, 1, 1, 0, 0)


def test_measurements_keep_the_asked_versions_and_name_an_unsampled_task_unmeasured(tmp_path: Path) -> None:
    trajectories = [
        _trajectory("e1", "a", "v1", 1.0),
        _trajectory("e2", "a", "v1", 0.0),
        _trajectory("e3", "a", "old", 1.0),  # another version of a: not this measurement's
        _trajectory("e4", "z", "v9", 1.0),  # a task not asked for
    ]
    found = measurements(trajectories, "m", 5, fixed_origin("tasks"), {"a": "v1", "b": "v2"})
    assert [m.to_json() for m in found] == [
        {"task_id": "a", "task_version": "v1", "samples": 2, "passes": 1, "unfinished": 0,
         "pass_rate": 0.5, "bucket": "medium"},
        {"task_id": "b", "task_version": "v2", "samples": 0, "passes": 0, "unfinished": 0,
         "pass_rate": 0.0, "bucket": "unmeasured"},
    ]  # fmt: skip
    record = found[0].record
    assert (record.policy_version, record.measured_by, record.bucket) == (5, "m", "medium")
    everything = measurements(trajectories, "m", 5, fixed_origin("tasks"))
    assert [(m.tally.task_id, m.tally.task_version) for m in everything] == [
        ("a", "old"), ("a", "v1"), ("z", "v9")
    ]  # fmt: skip
