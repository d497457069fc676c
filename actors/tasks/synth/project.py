"""A real Python project as synthesis sees it: the tree the agent will get, the modules that may be mutated,
and its test files under the flat names they get as a task's hidden tests.

The tree keeps what a developer's checkout of a release holds (the packages, their tests, metadata) and
drops what would tell the fix or is not the project: VCS folders, bytecode, build output, egg-info. A
`src/` layout is lifted to the top (`src/pkg` becomes `pkg`), because the grader puts the workspace itself
on sys.path, as a checkout with `pip install -e` would behave.

Test files are every `test_*.py` / `*_test.py` outside the skipped folders. Their hidden copies live flat in
the task's `tests/` (the grader imports them by file, with the workspace last on sys.path: a copy kept
under its package path would shadow the project's own package). Two files of the same name get their
folders in the name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from actors.tasks.testids import is_test_file

SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".bzr", "__pycache__", ".pytest_cache", ".tox", ".nox", ".mypy_cache",
     ".ruff_cache", "build", "dist", ".eggs", ".venv", "venv", "node_modules", ".github", ".idea"}
)  # fmt: skip
SKIPPED_SUFFIXES = (".pyc", ".pyo", ".orig", ".rej", ".bak", ".swp", "~", ".so", ".pyd")
# Folders whose Python is not the library: never mutated (their tests are still tests).
NOT_LIBRARY = frozenset(
    {"docs", "doc", "examples", "example", "benchmarks", "benchmark", "bench", "tools", "scripts", "bin"}
)
NOT_LIBRARY_FILES = frozenset({"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py"})
MAX_FILE_BYTES = 2 * 1024 * 1024


class ProjectError(ValueError):
    """A project synthesis cannot use, with what is wrong and where."""


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    files: dict[str, bytes]  # the tree the agent gets, by posix path relative to its root
    modules: tuple[str, ...]  # library modules synthesis may mutate, sorted
    tests: dict[str, str]  # test file path in `files` -> its flat name in the hidden tests/
    support: dict[str, str] = field(default_factory=dict)  # helper modules beside the tests -> flat name

    @property
    def source(self) -> str:
        """`name==version`, as recorded in a task's metadata."""
        return f"{self.name}=={self.version}"

    def tree_hash(self) -> str:
        digest = hashlib.sha256(b"trialog-synth-project-v1\0")
        for path in sorted(self.files):
            digest.update(path.encode() + b"\0" + len(self.files[path]).to_bytes(8, "big") + self.files[path])
        return digest.hexdigest()

    @property
    def top_level(self) -> tuple[str, ...]:
        """The importable names the library modules live under (`toolz`, `six`)."""
        names = {PurePosixPath(path).parts[0].removesuffix(".py") for path in self.modules}
        return tuple(sorted(names))

    def test_path(self, flat: str) -> str:
        """The tree path of the test file whose hidden name is `flat`."""
        for path, name in self.tests.items():
            if name == flat:
                return path
        raise KeyError(flat)


def load_project(root: Path, name: str, version: str) -> Project:
    """Read the project checkout (or unpacked sdist) at `root`."""
    root = Path(root)
    if not root.is_dir():
        raise ProjectError(f"{root}: not a folder")
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        relative = PurePosixPath(path.relative_to(root).as_posix())
        if any(part in SKIPPED_DIRS or part.endswith(".egg-info") for part in relative.parts):
            continue
        if path.is_symlink() or not path.is_file() or relative.name.endswith(SKIPPED_SUFFIXES):
            continue
        if path.stat().st_size > MAX_FILE_BYTES:
            continue
        files[str(relative)] = path.read_bytes()
    files = _lift_src(files)
    modules = tuple(sorted(path for path in files if _is_library(path)))
    if not modules:
        raise ProjectError(f"{root}: no library modules found (a .py file outside tests, docs and scripts)")
    test_paths = sorted(path for path in files if is_test_file(PurePosixPath(path).name))
    if not test_paths:
        raise ProjectError(f"{root}: no test files (test_*.py or *_test.py); does this sdist ship its tests?")
    tests = flat_names(test_paths)
    return Project(name, version, files, modules, tests, support_modules(files, tests, modules))


def support_modules(files: dict[str, bytes], tests: dict[str, str], modules: Sequence[str]) -> dict[str, str]:
    """Helper modules in the test files' folders (`from common import assert_equal`), which the flat
    hidden tests import as siblings: each under its own name, unless that name is already taken. Never
    conftest.py (the grader runs without conftests), `__init__.py` (it would make the hidden folder a
    package, and change how the tests are imported), setup.py and the like, nor a library module (six's
    tests sit beside six.py: a hidden copy of the original would shadow the agent's, and grade it)."""
    folders = {str(PurePosixPath(path).parent) for path in tests}
    taken = set(tests.values())
    library = set(modules)
    support: dict[str, str] = {}
    for path in sorted(files):
        pure = PurePosixPath(path)
        if str(pure.parent) not in folders or pure.suffix != ".py" or path in tests:
            continue
        if pure.name in ("conftest.py", "__init__.py") or pure.name in taken or path in library:
            continue
        if pure.name in NOT_LIBRARY_FILES:
            continue
        support[path] = pure.name
        taken.add(pure.name)
    return support


def _lift_src(files: dict[str, bytes]) -> dict[str, bytes]:
    packages = {path for path in files if path.startswith("src/") and path.count("/") >= 2}
    if not packages:
        return files
    lifted = {path: data for path, data in files.items() if not path.startswith("src/")}
    for path in sorted(files):
        if path.startswith("src/"):
            target = path[len("src/") :]
            if target in lifted:
                raise ProjectError(f"src/{target} and {target} would both be {target} once src/ is lifted")
            lifted[target] = files[path]
    return lifted


def _is_library(path: str) -> bool:
    parts = PurePosixPath(path).parts
    if not path.endswith(".py") or is_test_file(parts[-1]) or parts[-1] in NOT_LIBRARY_FILES:
        return False
    if any(part in ("tests", "test", "testing") for part in parts[:-1]):
        return False
    if parts[0] in NOT_LIBRARY or parts[-1] in ("_version.py", "version.py", "__main__.py"):
        return False
    return len(parts) > 1 or parts[0] not in NOT_LIBRARY_FILES


def flat_names(test_paths: list[str]) -> dict[str, str]:
    """Each test file's hidden name: its own name when unique, else prefixed by its folders."""
    by_name: dict[str, list[str]] = {}
    for path in test_paths:
        by_name.setdefault(PurePosixPath(path).name, []).append(path)
    names: dict[str, str] = {}
    for name, paths in by_name.items():
        for path in paths:
            if len(paths) == 1:
                names[path] = name
                continue
            folders = [p for p in PurePosixPath(path).parts[:-1] if p not in ("tests", "test")]
            stem = name[len("test_") :] if name.startswith("test_") else name
            names[path] = "test_" + "_".join([*folders, stem]).replace("-", "_")
    if len(set(names.values())) != len(names):
        raise ProjectError(f"test files whose flat names collide: {sorted(names)}")
    return names
