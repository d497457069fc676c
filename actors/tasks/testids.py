"""The frozen test ids of a task, found by reading its test files (never by running them).

The verifier must know which tests *should* be reported before it runs anything: a test that is missing
from the report (not collected, crashed the run, hidden by the workspace) counts as failed. Reading the
files statically gives that list without trusting any run. The rules are pytest's defaults, which the
verifier enforces (no workspace configuration is in effect): files `test_*.py` or `*_test.py`, functions
named `test*` at module level, `test*` methods of `Test*` classes without an `__init__`, nested
classes included, and `test*` methods of any class deriving from unittest's `TestCase` by name; a class
also has the test methods it inherits from classes defined earlier in the same file.

Ids look like pytest node ids relative to the task folder: `tests/test_calc.py::TestAdd::test_zero`. A
parametrized test has one id here; `expand_instances` replaces it by its instances
(`...::test_zero[1-2]`) as a trusted collection of the original repo/ found them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeGuard

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


# A test as collected: its name within the file, its function, the classes it runs in.
Test = tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, tuple[ast.ClassDef, ...]]


def iter_tests(
    body: list[ast.stmt], prefix: str = "", classes: tuple[ast.ClassDef, ...] = ()
) -> Iterator[Test]:
    """Each test of a parsed module's `body` as pytest collects it: its name within the file
    (`TestAdd::test_zero`), its function, and the classes it runs in: the test classes around it,
    outermost first, then the class's bases defined in the same file (where setUp or a helper may be).

    A class collects the test methods it inherits from classes of the same file (`class TestB(TestA)`
    reports `TestB::test_a`), as pytest does. Bases imported from elsewhere cannot be read here: their
    methods are not frozen ids, so a task whose tests rely on them fails validation as `unstable_ids`."""
    yield from _tests_in(body, prefix, classes, {})


def _tests_in(
    body: list[ast.stmt], prefix: str, classes: tuple[ast.ClassDef, ...], outer: dict[str, ast.ClassDef]
) -> Iterator[Test]:
    scope = dict(outer)  # the classes a base name can refer to here: this body's so far, and the outer ones
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            yield prefix + node.name, node, classes
        elif isinstance(node, ast.ClassDef):
            bases = same_file_bases(node, scope)
            scope[node.name] = node  # bound after its bases were looked up, as Python does
            if not is_test_class(node, bases):
                continue
            name, around = f"{prefix}{node.name}::", (*classes, node, *bases)
            yield from _tests_in(node.body, name, around, scope)
            own = _member_names(node)
            for base in bases:  # inherited test methods, nearest base first; an override hides a base's
                for item in base.body:
                    if _is_test_function(item) and item.name not in own:
                        own.add(item.name)
                        yield name + item.name, item, around


def same_file_bases(node: ast.ClassDef, scope: dict[str, ast.ClassDef]) -> tuple[ast.ClassDef, ...]:
    """The classes `node` derives from that `scope` defines, and theirs, depth first without repeats (an
    approximation of the MRO that is exact for single inheritance)."""
    found: list[ast.ClassDef] = []
    pending = [base.id for base in node.bases if isinstance(base, ast.Name)]
    pending.reverse()
    while pending:
        base = scope.get(pending.pop())
        if base is None or base is node or base in found:
            continue
        found.append(base)
        pending.extend(reversed([b.id for b in base.bases if isinstance(b, ast.Name)]))
    return tuple(found)


def _is_test_function(node: ast.stmt) -> TypeGuard[ast.FunctionDef | ast.AsyncFunctionDef]:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


def _member_names(node: ast.ClassDef) -> set[str]:
    """The names a class body binds (methods, nested classes, `test_x = None` hiding an inherited test)."""
    names: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(item.name)
        elif isinstance(item, ast.Assign):
            names.update(target.id for target in item.targets if isinstance(target, ast.Name))
        elif isinstance(item, ast.AnnAssign | ast.AugAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return names


# pytest collects a subclass of these whatever its name (and its `__init__` is unittest's own).
UNITTEST_BASES = frozenset({"TestCase", "IsolatedAsyncioTestCase"})


def is_test_class(node: ast.ClassDef, bases: Sequence[ast.ClassDef] = ()) -> bool:
    """A class pytest collects tests from: `Test*` without an `__init__` (its own or a same-file base's),
    or one deriving from unittest's TestCase (by name, or through a same-file base)."""
    if any(_is_unittest_class(cls) for cls in (node, *bases)):
        return True
    return node.name.startswith("Test") and not any(_has_init(cls) for cls in (node, *bases))


def _is_unittest_class(node: ast.ClassDef) -> bool:
    """A class naming unittest's TestCase among its bases (`TestCase`, `unittest.TestCase`). One deriving
    from a project's own base class of another file is not seen: its tests are then not frozen ids, so
    never graded."""
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
