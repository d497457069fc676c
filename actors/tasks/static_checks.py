"""Static findings on a task's hidden tests: what makes a frozen test a weak or unstable grader.

Read with `ast`, never run. For each test (the ids of `actors.tasks.testids`):

* `no-assertion`: nothing in the test can fail it. A test asserts when its body, or a helper it calls (a
  function of the same file, a method of its class, a function of a helper module beside the tests), holds
  an `assert` or `raise` statement, a `pytest.raises` / `warns` / `fail` / `deprecated_call`, or a call of
  anything named `assert*` (unittest's `self.assertEqual`, a mock's `assert_called_once`,
  `numpy.testing.assert_allclose`) or `fail*`.
* `no-code-under-test`: the test never reaches repo/. It does when what it runs (body, decorators, the
  helpers it calls, the fixtures it asks for, autouse fixtures, its class's other members) names something
  imported from a top-level module or package of repo/ (or of repo/src/), or from a helper module beside the
  tests that imports one, or names such a module in a string (`importlib.import_module("calc")`, `python
  calc.py`).
* `network`: it uses socket, urllib, http.client, requests, httpx, aiohttp, urllib3, ftplib or smtplib.
* `sleep`: `time.sleep`, `asyncio.sleep`.
* `wall-clock`: `time.time`, `time.time_ns`, `datetime.now` / `utcnow` / `today`, `date.today`, and
  `time.localtime` / `gmtime` / `ctime` with no argument (durations from `time.monotonic` are not the date).
* `unseeded-random`: a function of the `random` module with no `random.seed(...)` anywhere in the file or
  its conftest files, `random.Random()` without a seed, `numpy.random.*` without a `numpy.random.seed(...)`,
  `numpy.random.default_rng()` without a seed, `random.SystemRandom`, `os.urandom`, `secrets.*`. Fresh
  `uuid.uuid4()` ids are not counted: a test rarely depends on an id's value.

The same three levels of reach serve every kind but `no-assertion`, which counts only what the test calls
(a fixture that asserts does not make the test check the code). Names are resolved through the file's
imports (`import numpy as np`, `from time import sleep`); a name bound any other way is not resolved, so
the checks can miss things (a module passed around as a value) but do not invent them. Findings are
warnings: `trialog tasks validate` lists them, and refuses the task only with `--strict-tests`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from actors.tasks.parsing import parse
from actors.tasks.spec import Task
from actors.tasks.testids import find_test_files, is_test_file, iter_tests

Function = ast.FunctionDef | ast.AsyncFunctionDef


class FindingKind(StrEnum):
    NO_ASSERTION = "no-assertion"
    NO_CODE_UNDER_TEST = "no-code-under-test"
    NETWORK = "network"
    SLEEP = "sleep"
    WALL_CLOCK = "wall-clock"
    UNSEEDED_RANDOM = "unseeded-random"


@dataclass(frozen=True)
class Finding:
    """One weakness of one hidden test: where (`file` relative to the task folder, `line`) and what."""

    test_id: str
    kind: FindingKind
    file: str
    line: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test_id,
            "kind": self.kind.value,
            "file": self.file,
            "line": self.line,
            "text": self.text,
        }

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.test_id} ({self.file}:{self.line}) {self.text}"


NETWORK_MODULES = frozenset(
    {"socket", "urllib", "http", "requests", "httpx", "aiohttp", "urllib3", "ftplib", "smtplib"}
)
SLEEPS = frozenset({"time.sleep", "asyncio.sleep"})
WALL_CLOCK = frozenset(
    {
        "time.time",
        "time.time_ns",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
    }
)
WALL_CLOCK_WITHOUT_ARGUMENT = frozenset({"time.localtime", "time.gmtime", "time.ctime"})
ASSERTING = frozenset({"pytest.raises", "pytest.warns", "pytest.fail", "pytest.deprecated_call"})
# Functions of `random` that draw from the module's shared generator (seeded by `random.seed`).
RANDOM_DRAWS = frozenset(
    {
        "random",
        "randint",
        "randrange",
        "choice",
        "choices",
        "shuffle",
        "sample",
        "uniform",
        "gauss",
        "normalvariate",
        "triangular",
        "betavariate",
        "expovariate",
        "gammavariate",
        "lognormvariate",
        "paretovariate",
        "vonmisesvariate",
        "weibullvariate",
        "getrandbits",
        "randbytes",
        "binomialvariate",
    }
)
# unittest's assertEqual / failUnless, a mock's assert_called_once, numpy.testing.assert_allclose, fail()
_ASSERTING_NAME = re.compile(r"(assert|fail)([A-Z_0-9]|$)")
NEVER_SEEDED = frozenset({"random.SystemRandom", "os.urandom"})


def check_task(task: Task) -> tuple[Finding, ...]:
    """Every finding on the hidden tests of `task`, in test id then kind order."""
    return check_tests(task.root, task.tests_dir, repo_modules(task.repo_dir))


def repo_modules(repo_dir: Path) -> frozenset[str]:
    """The names a test imports repo/'s code by: its top-level modules and packages, and those of repo/src/
    (test files, conftest.py and test folders are left out: they are not the code under test)."""
    names: set[str] = set()
    for folder in (repo_dir, repo_dir / "src"):
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.name.startswith((".", "_")) or entry.is_symlink():
                continue
            if entry.is_file() and entry.suffix == ".py":
                if not is_test_file(entry.name) and entry.stem != "conftest":
                    names.add(entry.stem)
            elif entry.is_dir() and entry.name not in ("tests", "test", "src") and _holds_python(entry):
                names.add(entry.name)
    return frozenset(names)


def _holds_python(folder: Path) -> bool:
    return any(path.is_file() for path in folder.rglob("*.py"))


def check_tests(task_dir: Path, tests_dir: Path, code_modules: frozenset[str]) -> tuple[Finding, ...]:
    """Findings on the tests under `tests_dir` (ids relative to `task_dir`), `code_modules` being the
    top-level names of the code under test."""
    helpers = _HelperModules.of(tests_dir, code_modules)
    conftests = [_Module.parse(path, task_dir) for path in sorted(tests_dir.rglob("conftest.py"))]
    findings: list[Finding] = []
    for path in find_test_files(tests_dir):
        module = _Module.parse(path, task_dir)
        if module is None:
            continue  # load_task refuses an unparsable test file: nothing to add here
        context = _Context(module, [c for c in conftests if c is not None], helpers, code_modules)
        findings += context.findings()
    return tuple(findings)


# -- one parsed file ------------------------------------------------------------------------------------


@dataclass
class _Module:
    path: Path
    relative: str
    tree: ast.Module
    aliases: dict[str, str]  # a local name -> the dotted name it was imported as
    functions: dict[str, Function]  # module-level functions by name
    fixtures: dict[str, Function] = field(default_factory=dict)
    autouse: list[Function] = field(default_factory=list)

    @classmethod
    def parse(cls, path: Path, task_dir: Path) -> _Module | None:
        try:
            tree = parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):
            return None
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        module = cls(path, path.relative_to(task_dir).as_posix(), tree, _aliases(tree), functions)
        for function in _fixtures(tree):
            module.fixtures[_fixture_name(function)] = function
            if _is_autouse(function):
                module.autouse.append(function)
        return module

    def resolve(self, node: ast.expr) -> str | None:
        """The dotted name `node` (a name or attribute chain) stands for, through the file's imports."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        return ".".join([self.aliases[node.id], *reversed(parts)])


def _aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    aliases[head] = head
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _imported_modules(nodes: Iterable[ast.AST]) -> Iterator[tuple[str, ast.stmt]]:
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, node


def _fixtures(tree: ast.Module) -> Iterator[Function]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _decorator_name(d).endswith("fixture") for d in node.decorator_list
        ):
            yield node


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _fixture_name(function: Function) -> str:
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call):
            for keyword in decorator.keywords:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    return str(keyword.value.value)
    return function.name


def _is_autouse(function: Function) -> bool:
    return any(
        isinstance(d, ast.Call)
        and any(
            k.arg == "autouse" and isinstance(k.value, ast.Constant) and k.value.value for k in d.keywords
        )
        for d in function.decorator_list
    )


# -- helper modules beside the tests ----------------------------------------------------------------------


@dataclass(frozen=True)
class _HelperModules:
    """Non-test modules under tests/ (helpers.py, a fixtures module): by their last name, which functions of
    each assert, and whether the module reaches repo/ (imports it)."""

    asserting: Mapping[str, frozenset[str]]
    reaching: frozenset[str]

    @classmethod
    def of(cls, tests_dir: Path, code_modules: frozenset[str]) -> _HelperModules:
        asserting: dict[str, frozenset[str]] = {}
        reaching: set[str] = set()
        for path in sorted(tests_dir.rglob("*.py")):
            if "__pycache__" in path.parts or not path.is_file() or path.name == "conftest.py":
                continue
            module = _Module.parse(path, tests_dir)
            if module is None:
                continue
            name = path.stem
            asserting[name] = frozenset(
                function for function in module.functions if _asserts_through(module, function, set())
            )
            if any(m.split(".")[0] in code_modules for m, _ in _imported_modules(ast.walk(module.tree))):
                reaching.add(name)
        return cls(asserting, frozenset(reaching))


def _asserts_through(module: _Module, name: str, seen: set[str]) -> bool:
    """Whether the module-level function `name` of `module` asserts, itself or through functions of the
    module it calls."""
    if name in seen or name not in module.functions:
        return False
    seen.add(name)
    for node in ast.walk(module.functions[name]):
        if _is_assertion(module, node):
            return True
        called = node.func if isinstance(node, ast.Call) else None
        if isinstance(called, ast.Name) and _asserts_through(module, called.id, seen):
            return True
    return False


def _is_assertion(module: _Module, node: ast.AST) -> bool:
    if isinstance(node, ast.Assert | ast.Raise):
        return True
    if isinstance(node, ast.Call):
        called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if _ASSERTING_NAME.match(called):
            return True
        return module.resolve(node.func) in ASSERTING
    if isinstance(node, ast.With | ast.AsyncWith):
        return any(
            isinstance(item.context_expr, ast.Call) and module.resolve(item.context_expr.func) in ASSERTING
            for item in node.items
        )
    return False


# -- one test file --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    """A piece of code a test runs: the node and, when it is not the test's own body, what it is."""

    node: ast.AST
    module: _Module
    via: str = ""


class _Context:
    def __init__(
        self, module: _Module, conftests: Sequence[_Module], helpers: _HelperModules, code: frozenset[str]
    ) -> None:
        self.module, self.conftests, self.helpers, self.code = module, conftests, helpers, code
        everything = [module, *conftests]
        self.seeded_random = any(_calls(m, "random.seed") for m in everything)
        self.seeded_numpy = any(_calls(m, "numpy.random.seed") for m in everything)

    def findings(self) -> Iterator[Finding]:
        for name, function, classes in iter_tests(self.module.tree.body):
            test_id = f"{self.module.relative}::{name}"
            called = list(self._called(function, classes))
            reached = called + list(self._setup(function, classes))
            if not self._asserts(called):
                yield self._finding(
                    test_id,
                    FindingKind.NO_ASSERTION,
                    _Part(function, self.module),
                    "nothing in the test can fail it (no assert, raises, or assert* call)",
                )
            if self.code and not self._reaches_code(reached):
                modules = ", ".join(sorted(self.code))
                yield self._finding(
                    test_id,
                    FindingKind.NO_CODE_UNDER_TEST,
                    _Part(function, self.module),
                    f"uses nothing from repo/ ({modules})",
                )
            yield from self._uses(test_id, reached)

    def _finding(self, test_id: str, kind: FindingKind, part: _Part, text: str, line: int = 0) -> Finding:
        where = f" (in {part.via})" if part.via else ""
        line = line or getattr(part.node, "lineno", 0)
        return Finding(test_id, kind, part.module.relative, line, text + where)

    # -- what a test runs

    def _called(self, function: Function, classes: tuple[ast.ClassDef, ...]) -> Iterator[_Part]:
        """The test's body and decorators, and the helpers it calls (same file, its classes), transitively."""
        members = {
            n.name: n
            for c in classes
            for n in c.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        yield _Part(function, self.module)
        seen = {function.name}
        pending = [function]
        while pending:
            for node in ast.walk(pending.pop()):
                if not isinstance(node, ast.Call):
                    continue
                target: Function | None = None
                if isinstance(node.func, ast.Name):
                    target = self.module.functions.get(node.func.id)
                elif isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) in ("self", "cls"):
                    target = members.get(node.func.attr)
                if target is not None and target.name not in seen:
                    seen.add(target.name)
                    pending.append(target)
                    yield _Part(target, self.module, f"helper {target.name}")

    def _setup(self, function: Function, classes: tuple[ast.ClassDef, ...]) -> Iterator[_Part]:
        """What runs around the test: the fixtures it asks for (and theirs), autouse fixtures, and the other
        members of its classes (setUp, class attributes)."""
        for cls in classes:
            for member in cls.body:
                if member is not function and not (
                    isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef)
                    and member.name.startswith("test")
                ):
                    yield _Part(member, self.module, f"class {cls.name}")
        wanted = [
            arg.arg for arg in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)
        ]
        wanted += _used_fixtures(function)
        modules = [self.module, *self.conftests]
        for module in modules:
            for fixture in module.autouse:
                yield _Part(fixture, module, f"autouse fixture {fixture.name}")
        seen: set[str] = set()
        while wanted:
            name = wanted.pop()
            if name in seen:
                continue
            seen.add(name)
            for module in modules:
                found = module.fixtures.get(name)
                if found is not None:
                    yield _Part(found, module, f"fixture {name}")
                    wanted += [arg.arg for arg in found.args.args]
                    break

    # -- the checks

    def _asserts(self, parts: Sequence[_Part]) -> bool:
        for part in parts:
            for node in ast.walk(part.node):
                if _is_assertion(part.module, node):
                    return True
                if isinstance(node, ast.Call):
                    called = part.module.resolve(node.func) or ""
                    helper, _, function = called.rpartition(".")
                    if function in self.helpers.asserting.get(helper.split(".")[-1], ()):
                        return True
        return False

    def _reaches_code(self, parts: Sequence[_Part]) -> bool:
        carriers = self.code | self.helpers.reaching
        return any(
            self._names_code(part.module, node, carriers) for part in parts for node in ast.walk(part.node)
        )

    def _names_code(self, module: _Module, node: ast.AST, carriers: frozenset[str]) -> bool:
        if isinstance(node, ast.Name | ast.Attribute):
            name = module.resolve(node)
            return name is not None and _roots_in(name, carriers)
        if isinstance(node, ast.Import | ast.ImportFrom):
            return any(_roots_in(m, carriers) for m, _ in _imported_modules([node]))
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return _names_a_module(node.value, self.code)
        return False

    def _uses(self, test_id: str, parts: Sequence[_Part]) -> Iterator[Finding]:
        found: dict[FindingKind, Finding] = {}
        for part in parts:
            for node in ast.walk(part.node):
                kind_text = self._use(part.module, node)
                if kind_text is not None and kind_text[0] not in found:
                    kind, text = kind_text
                    found[kind] = self._finding(test_id, kind, part, text, getattr(node, "lineno", 0))
        yield from (found[kind] for kind in FindingKind if kind in found)

    def _use(self, module: _Module, node: ast.AST) -> tuple[FindingKind, str] | None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            for imported, _ in _imported_modules([node]):
                if imported.split(".")[0] in NETWORK_MODULES:
                    return FindingKind.NETWORK, f"imports {imported}"
            return None
        if isinstance(node, ast.Name | ast.Attribute):
            used = module.resolve(node)
            if used is not None and used.split(".")[0] in NETWORK_MODULES:
                return FindingKind.NETWORK, f"uses {used}"
            return None
        if not isinstance(node, ast.Call):
            return None
        name = module.resolve(node.func)
        if name is None:
            return None
        bare = not node.args and not node.keywords
        if name in SLEEPS:
            return FindingKind.SLEEP, f"calls {name}()"
        if name in WALL_CLOCK or (name in WALL_CLOCK_WITHOUT_ARGUMENT and bare):
            return FindingKind.WALL_CLOCK, f"reads the wall clock: {name}()"
        return self._randomness(name, bare)

    def _randomness(self, name: str, bare: bool) -> tuple[FindingKind, str] | None:
        unseeded = (
            name in NEVER_SEEDED
            or name.startswith("secrets.")
            or (name == "random.Random" and bare)
            or (
                name.startswith("random.")
                and name.removeprefix("random.") in RANDOM_DRAWS
                and not self.seeded_random
            )
            or (name == "numpy.random.default_rng" and bare)
            or (
                name.startswith("numpy.random.")
                and name
                not in (
                    "numpy.random.seed",
                    "numpy.random.default_rng",
                    "numpy.random.RandomState",
                    "numpy.random.Generator",
                )
                and not self.seeded_numpy
            )
            or (name == "numpy.random.RandomState" and bare)
        )
        return (FindingKind.UNSEEDED_RANDOM, f"draws unseeded randomness: {name}()") if unseeded else None


def _used_fixtures(function: Function) -> list[str]:
    """Fixture names of `@pytest.mark.usefixtures("a", "b")`."""
    names = []
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and _decorator_name(decorator).endswith("usefixtures"):
            names += [
                a.value for a in decorator.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
    return names


def _calls(module: _Module, dotted: str) -> bool:
    return any(isinstance(n, ast.Call) and module.resolve(n.func) == dotted for n in ast.walk(module.tree))


def _roots_in(dotted: str, modules: frozenset[str]) -> bool:
    return dotted.split(".")[0] in modules


def _names_a_module(text: str, modules: frozenset[str]) -> bool:
    words = text.replace("/", " ").replace("\\", " ").split()
    return any(word.removesuffix(".py").split(".")[0] in modules for word in words)
