"""All 164 imported HumanEval tasks are valid: the stub fails its frozen test, the canonical solution passes.

The unit tests check a sample; this checks every problem with the host Python (~1 minute on 2 cores).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from actors.tasks.hostrun import run_tests
from actors.tasks.humaneval import import_humaneval
from actors.tasks.reward import Verdict, grade
from actors.tasks.spec import Task, load_tasks
from tests.unit.tasks.helpers import humaneval_wheel_path


def _verdicts(task: Task, scratch: Path) -> tuple[Verdict, Verdict]:
    stub = run_tests(task, task.copy_repo(scratch / f"{task.id}-stub"))
    solved = run_tests(task, task.copy_repo(scratch / f"{task.id}-solved", solved=True))
    # With the harness's tamper signals: a canonical solution the harness mistook for tampering would show.
    return (
        grade(expected=task.test_ids, reports=stub.reports, tamper_signals=stub.harness.signals).verdict,
        grade(expected=task.test_ids, reports=solved.reports, tamper_signals=solved.harness.signals).verdict,
    )


def test_every_humaneval_task_is_valid(tmp_path: Path) -> None:
    import_humaneval(tmp_path / "tasks", source=humaneval_wheel_path())
    tasks = load_tasks([tmp_path / "tasks"])
    assert len(tasks) == 164
    with ThreadPoolExecutor(max_workers=2 * (os.cpu_count() or 1)) as pool:
        verdicts = list(pool.map(lambda t: _verdicts(t, tmp_path), tasks))
    wrong = {t.id: v for t, v in zip(tasks, verdicts, strict=True) if v != (Verdict.FAIL, Verdict.PASS)}
    assert wrong == {}
