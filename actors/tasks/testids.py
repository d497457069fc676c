"""The frozen test ids of a task, found by reading its test files (never by running them).

The verifier must know which tests *should* be reported before it runs anything: a test that is missing
from the report (not collected, crashed the run, hidden by the workspace) counts as failed. Reading the
files statically gives that list without trusting any run. The rules are pytest's defaults, which the
verifier enforces (no workspace configuration is in effect): files `test_*.py` or `*_test.py`, functions
named `test*` at module level, `test*` methods of `Test*` classes without an `__init__`, nested
classes included, and `test*` methods of any class deriving from unittest's `TestCase` by name.

Ids look like pytest node ids relative to the task folder: `tests/test_calc.py::TestAdd::test_zero`. A
parametrized test has one id here; `expand_instances` replaces it by its instances
(`...::test_zero[1-2]`) as a trusted collection of the original repo/ found them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path

from actors.tasks.parsing import parse


class TestFileError(ValueError):
    """A frozen test file that cannot be read; `path` is the file."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def is_test_file(name: str) -> bool:
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def find_test_files(tests_dir: Path) -> list[Path]:
    """The test files under `tests_dir`, sorted; `__pycache__` folders are skipped."""
    return sorted(
        path
        for path in tests_dir.rglob("*.py")
        if is_test_file(path.name) and "__pycache__" not in path.parts and path.is_file()
    )


def discover_test_ids(task_dir: Path, tests_dir: Path) -> tuple[str, ...]:
    """All test ids under `tests_dir`, relative to `task_dir`, in file then source order."""
    ids: list[str] = []
    for path in find_test_files(tests_dir):
        relative = path.relative_to(task_dir).as_posix()
        if "[" in relative or "::" in relative:
            raise TestFileError(path, "test file paths may not contain '[' or '::' (they delimit test ids)")
        ids.extend(f"{relative}::{name}" for name in _names_in(path))
    # A name defined twice in one file is collected once by pytest (the later definition wins).
    return tuple(dict.fromkeys(ids))


def _names_in(path: Path) -> Iterator[str]:
    yield from names_of_tests(path.read_bytes(), path)


def names_of_tests(source: bytes | str, path: Path) -> Iterator[str]:
    """The test names of one file's `source` (`test_x`, `TestA::test_y`), in source order."""
    try:
        tree = parse(source, filename=str(path))
    except SyntaxError as exc:
        raise TestFileError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes
        raise TestFileError(path, f"cannot be parsed: {exc}") from None
    for name, _function, _classes in iter_tests(tree.body):
        yield name


def iter_tests(
    body: list[ast.stmt], prefix: str = "", classes: tuple[ast.ClassDef, ...] = ()
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, tuple[ast.ClassDef, ...]]]:
    """Each test of a parsed module's `body` as pytest collects it: its name within the file
    (`TestAdd::test_zero`), its function, and the test classes around it, outermost first."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            yield prefix + node.name, node, classes
        elif isinstance(node, ast.ClassDef) and is_test_class(node):
            yield from iter_tests(node.body, f"{prefix}{node.name}::", (*classes, node))


# pytest collects a subclass of these whatever its name (and its `__init__` is unittest's own).
UNITTEST_BASES = frozenset({"TestCase", "IsolatedAsyncioTestCase"})


def is_test_class(node: ast.ClassDef) -> bool:
    """A class pytest collects tests from: `Test*` without an `__init__`, or one deriving from unittest's."""
    return (node.name.startswith("Test") and not _has_init(node)) or _is_unittest_class(node)


def _is_unittest_class(node: ast.ClassDef) -> bool:
    """A class naming unittest's TestCase among its bases (`TestCase`, `unittest.TestCase`). One deriving
    from a project's own base class is not seen: its tests are then not frozen ids, so never graded."""
    names = {base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in node.bases}
    return bool(names & UNITTEST_BASES)


def _has_init(node: ast.ClassDef) -> bool:
    # pytest refuses to collect test classes with an __init__ (it warns and skips them).
    return any(isinstance(item, ast.FunctionDef) and item.name == "__init__" for item in node.body)


def expand_instances(static_ids: Sequence[str], collected: Sequence[str]) -> tuple[str, ...]:
    """Each static id replaced by its collected instances (itself, or `id[...]`), in collection order.

    A static id that was not collected (its file did not import in the trusted collection) stays as it
    is; collected ids that belong to no static id are left out, since only the frozen functions count.
    """
    by_base: dict[str, list[str]] = {}
    for node_id in collected:
        base, bracket, _ = node_id.partition("[")
        if not bracket:
            by_base.setdefault(node_id, []).append(node_id)
        elif node_id.endswith("]"):
            by_base.setdefault(base, []).append(node_id)
    expanded: list[str] = []
    for static_id in static_ids:
        expanded.extend(by_base.get(static_id) or [static_id])
    return tuple(dict.fromkeys(expanded))


# What can give a test function several instances: pytest's parametrize mark, a `pytest_generate_tests`
# hook, and fixtures with `params` (they parametrize every test that uses them, through `metafunc`).
_INSTANCE_MAKERS = (b"parametrize", b"pytest_generate_tests", b"params", b"metafunc")


def may_have_instances(tests_dir: Path) -> bool:
    """Whether any file under `tests_dir` could make a test parametrized (a conservative scan of the
    source for the words that do it). When none can, the static ids are the instance ids, and the
    verifier needs no trusted collection: that saves one pytest start per task version, which for a set of
    thousands of one-test tasks (HumanEval) is most of the first grading's cost."""
    return any(
        any(word in path.read_bytes() for word in _INSTANCE_MAKERS)
        for path in sorted(tests_dir.rglob("*.py"))
        if path.is_file() and not path.is_symlink()
    )
