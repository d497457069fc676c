"""Every example task is genuinely valid: repo/ fails a frozen test, repo/ + solution.patch passes them all.

Run with the host Python (subprocess pytest in temporary folders), so CI proves the examples without
sandboxes. The solved tree is graded twice, to catch flaky tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from actors.tasks.hostrun import run_tests
from actors.tasks.reward import Grade, Verdict, grade
from actors.tasks.spec import find_tasks, load_task

from .helpers import git_apply

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tasks"
FOLDERS = find_tasks(EXAMPLES)


@dataclass(frozen=True)
class Checked:
    unsolved: Grade
    solved: tuple[Grade, Grade]
    solved_output: str
    visible_tests: subprocess.CompletedProcess[str] | None
    git_apply_ok: bool


def _check(folder: Path) -> Checked:
    task = load_task(folder)
    with tempfile.TemporaryDirectory(prefix="trialog-example-") as scratch:
        root = Path(scratch)
        unsolved = task.copy_repo(root / "unsolved")
        solved = task.copy_repo(root / "solved", solved=True)
        by_git = task.copy_repo(root / "git")
        git_ok = git_apply(task.patch_path, by_git).returncode == 0 and _same_files(solved, by_git)
        runs = [run_tests(task, solved), run_tests(task, solved)]
        return Checked(
            unsolved=grade(expected=task.test_ids, reports=run_tests(task, unsolved).reports),
            solved=(
                grade(expected=task.test_ids, reports=runs[0].reports),
                grade(expected=task.test_ids, reports=runs[1].reports),
            ),
            solved_output=runs[0].output,
            visible_tests=_run_visible_tests(solved) if (solved / "tests").is_dir() else None,
            git_apply_ok=git_ok,
        )


def _same_files(a: Path, b: Path) -> bool:
    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    return files(a) == files(b)


def _run_visible_tests(workspace: Path) -> subprocess.CompletedProcess[str]:
    # As the agent would run them in its workspace, with the repo's own configuration.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST"))}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    return subprocess.run(command, cwd=workspace, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def checked() -> dict[str, Checked]:
    # Subprocesses dominate: check the tasks in parallel, then report them one test each.
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(zip([f.name for f in FOLDERS], pool.map(_check, FOLDERS), strict=True))


def test_the_example_set() -> None:
    tasks = [load_task(folder) for folder in FOLDERS]
    assert len(tasks) >= 20
    difficulties = Counter(t.spec.meta.difficulty for t in tasks)
    assert difficulties["easy"] >= 6 and difficulties["medium"] >= 6 and difficulties["hard"] >= 3
    assert sum(1 for t in tasks if t.spec.protected and (t.repo_dir / "tests").is_dir()) >= 3
    for task in tasks:
        assert task.id == task.root.name
        assert task.spec.meta.source == "trialog-examples"
        assert len(list(task.repo_dir.rglob("*.py"))) >= 2, f"{task.id} is not multi-file"


@pytest.mark.parametrize("name", [f.name for f in FOLDERS])
def test_example_is_valid(name: str, checked: dict[str, Checked]) -> None:
    result = checked[name]
    assert result.unsolved.verdict in (Verdict.FAIL, Verdict.PARTIAL), (
        "repo/ already passes every frozen test"
    )
    for solved in result.solved:
        assert solved.verdict is Verdict.PASS, f"{solved.failed_tests}\n{result.solved_output}"
    assert result.git_apply_ok, "git apply gives a different tree than the built-in applier"
    if result.visible_tests is not None:
        assert result.visible_tests.returncode == 0, result.visible_tests.stdout
