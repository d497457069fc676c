"""A synthesized task's hidden tests: the project's test files cut down to the tests chosen for the task.

The cut removes the test functions and methods not chosen (their decorators with them) and the test
classes left with none, by line spans of the source, so what stays reads exactly as the project wrote it.
Helpers, fixtures and imports stay: a chosen test may need them. The grader finds the same ids in the cut
file as synthesis chose (checked by the writer against `actors.tasks.testids`).
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator

from actors.tasks.parsing import parse
from actors.tasks.testids import is_test_class


class CutError(ValueError):
    """A test file that cannot be cut (it does not parse)."""


def cut_tests(source: str, keep: Collection[str]) -> str:
    """`source` without the tests whose names (`test_x`, `TestA::test_y`: ids without the file part and
    without parameters) are not in `keep`."""
    try:
        tree = parse(source)
    except SyntaxError as exc:
        raise CutError(f"syntax error at line {exc.lineno}: {exc.msg}") from None
    lines = source.splitlines(keepends=True)
    drop: list[tuple[int, int]] = sorted(_spans(tree.body, "", set(keep)))
    out: list[str] = []
    at = 0
    for start, end in drop:  # 0-based [start, end) line spans, never overlapping (siblings or nested once)
        out.extend(lines[at:start])
        at = max(at, end)
    out.extend(lines[at:])
    return "".join(out)


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


def _spans(body: list[ast.stmt], prefix: str, keep: set[str]) -> Iterator[tuple[int, int]]:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            if prefix + node.name not in keep:
                yield _span(node)
        elif isinstance(node, ast.ClassDef) and is_test_class(node):
            name = f"{prefix}{node.name}::"
            if not any(test.startswith(name) for test in keep):
                yield _span(node)
                continue
            inner = list(_spans(node.body, name, keep))
            tests_left = [
                item
                for item in node.body
                if not (isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _span(item) in inner)
            ]
            if not tests_left:  # cannot happen while one of its tests is kept; guards an empty class body
                yield _span(node)
            else:
                yield from inner


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", []))])
    assert node.end_lineno is not None
    return first - 1, node.end_lineno
