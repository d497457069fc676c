"""Files the grading harness places next to the frozen tests (outside the workspace); see docs/grading.md."""

from collections.abc import Iterator
from pathlib import Path

from actors.tasks.asserts import rewrite_asserts
from actors.tasks.testids import is_test_file

HARNESS_DIR = Path(__file__).parent
LAUNCHER = "trialog_launch.py"
GUARD = "trialog_guard.py"
REPO_INPUT = "repo"  # the task's original repo/, for the trusted collection


def harness_files(tests_dir: Path) -> Iterator[tuple[str, bytes]]:
    """The harness as the sandbox (or a host run) receives it: launcher, guard, config, frozen tests.

    Test files come with their `==`/`in` asserts rewritten (see `actors.tasks.asserts`).
    """
    yield LAUNCHER, (HARNESS_DIR / LAUNCHER).read_bytes()
    yield GUARD, (HARNESS_DIR / GUARD).read_bytes()
    # An empty configuration of our own: nothing in the workspace decides how tests are collected.
    yield "pytest.ini", b"[pytest]\n"
    for path, data in files_under(tests_dir):
        yield f"tests/{path}", rewrite_asserts(data) if is_test_file(Path(path).name) else data


def files_under(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            yield path.relative_to(root).as_posix(), path.read_bytes()
