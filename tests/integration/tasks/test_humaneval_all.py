"""All 164 imported HumanEval tasks are valid: the stub fails its frozen test, the canonical solution passes.

The unit tests check a sample; this checks every problem with the host Python. The canonical solutions run
under the grading harness (a solution the harness mistook for tampering would show); the stubs run their
test functions in a bare interpreter, which is all "fails" needs to be seen, at a fraction of a pytest
start each (this test took 7 minutes of the suite's 40 with both under the harness).
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from actors.tasks.hostrun import run_tests
from actors.tasks.humaneval import import_humaneval
from actors.tasks.reward import Verdict, grade
from actors.tasks.spec import Task, load_tasks
from tests.unit.tasks.helpers import humaneval_wheel_path

# Runs every test_* function of the test files given, with the repo first on the path: exit 0 when all
# pass, 1 when one raises.
BARE_RUNNER = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
failed = 0
for path in sys.argv[2:]:
    for name, value in runpy.run_path(path).items():
        if name.startswith("test_") and callable(value):
            try:
                value()
            except BaseException:
                failed += 1
sys.exit(1 if failed else 0)
"""


def _bare_passes(task: Task, repo: Path) -> bool:
    tests = sorted(str(path) for path in task.tests_dir.glob("test_*.py"))
    assert tests, task.id
    done = subprocess.run(
        [sys.executable, "-I", "-c", BARE_RUNNER, str(repo), *tests], capture_output=True, timeout=60
    )
    assert done.returncode in (0, 1), done.stderr.decode(errors="replace")[-2000:]
    return done.returncode == 0


def _verdicts(task: Task, scratch: Path) -> tuple[Verdict, Verdict]:
    # The bare runner must tell the two apart: the stub fails and the canonical solution passes there too.
    stub_passes = _bare_passes(task, task.copy_repo(scratch / f"{task.id}-stub"))
    bare_solved = _bare_passes(task, task.copy_repo(scratch / f"{task.id}-bare", solved=True))
    stub = Verdict.PASS if stub_passes or not bare_solved else Verdict.FAIL
    solved = run_tests(task, task.copy_repo(scratch / f"{task.id}-solved", solved=True))
    # With the harness's tamper signals: a canonical solution the harness mistook for tampering would show.
    return (
        stub,
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
