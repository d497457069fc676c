"""A synthesized task's hidden tests: the project's test files cut down to the tests chosen for the task.

The cut removes the test functions and methods not chosen (their decorators with them) and the test
classes left with none, by line spans of the source, so what stays reads exactly as the project wrote it.
Helpers, fixtures and imports stay: a chosen test may need them. The grader finds the same ids in the cut
file as synthesis chose (checked by the writer against `actors.tasks.testids`).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from actors.tasks.parsing import parse
from actors.tasks.testids import is_test_class, iter_tests, same_file_bases


class CutError(ValueError):
    """A test file that cannot be cut (it does not parse)."""


def cut_tests(source: str, keep: Collection[str]) -> str:
    """`source` without the tests whose names (`test_x`, `TestA::test_y`: ids without the file part and
    without parameters) are not in `keep`.

    A kept test keeps the function it runs and every class it runs in: `TestB::test_a` inherited from
    `TestA` keeps `TestA` and its `test_a` even when `TestA::test_a` itself was not asked for (the cut file
    then reports it too: `synth.writer` adds such tests to the task)."""
    try:
        tree = parse(source)
    except SyntaxError as exc:
        raise CutError(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    tests = list(iter_tests(tree.body))
    wanted = set(keep)
    kept = [(function, classes) for name, function, classes in tests if name in wanted]
    plan = _Plan(
        tests={id(function) for _, function, _ in tests},
        functions={id(function) for function, _ in kept},
        classes={id(cls) for _, classes in kept for cls in classes},
    )
    lines = source.splitlines(keepends=True)
    drop: list[Drop] = sorted(_spans(tree.body, {}, plan))
    out: list[str] = []
    at = 0
    for start, end, instead in drop:  # 0-based [start, end) spans, never overlapping (siblings or nested)
        out.extend(lines[at:start])
        out.append(instead)
        at = max(at, end)
    out.extend(lines[at:])
    return "".join(out)


Drop = tuple[int, int, str]  # lines [start, end) (0-based) of the source, and the text put there instead


@dataclass(frozen=True)
class _Plan:
    tests: set[int]  # the functions some test id runs (by node identity)
    functions: set[int]  # those a kept test runs
    classes: set[int]  # the classes a kept test runs in (its own, those around it, their same-file bases)


def needed_tests(source: str, keep: Collection[str]) -> set[str]:
    """`keep` and the module-level tests the kept ones call by name, transitively (`test_is_partial`
    calling `test_is_valid`): cutting those would break the kept ones."""
    tree = parse(source)
    functions = {
        node.name: node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }
    needed, todo = set(keep), [name for name in keep if name in functions]
    while todo:
        for node in ast.walk(functions[todo.pop()]):
            if isinstance(node, ast.Name) and node.id in functions and node.id not in needed:
                needed.add(node.id)
                todo.append(node.id)
    return needed


def _spans(
    body: list[ast.stmt], outer: dict[str, ast.ClassDef], plan: _Plan, *, class_body: bool = False
) -> Iterator[Drop]:
    """The line spans to drop from `body`: test functions no kept test runs, and test classes no kept test
    runs in. Other classes (helpers, mixins) stay, less the test methods no kept test inherits."""
    scope = dict(outer)
    drops: list[Drop] = []
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if id(node) in plan.tests and id(node) not in plan.functions:
                drops.append((*_span(node), ""))
        elif isinstance(node, ast.ClassDef):
            bases = same_file_bases(node, scope)
            scope[node.name] = node
            if id(node) not in plan.classes and is_test_class(node, bases):
                drops.append((*_span(node), ""))
            else:
                yield from _spans(node.body, scope, plan, class_body=True)
    if class_body and drops and len(drops) == len(body):  # a class body cannot be empty: `pass` stays
        start, end, _ = drops.pop()
        drops.append((start, end, " " * body[-1].col_offset + "pass\n"))
    yield from drops


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", []))])
    assert node.end_lineno is not None
    return first - 1, node.end_lineno
