"""Rewriting the frozen tests' `==` / `in` asserts so that an always-true `__eq__` cannot pass them.

The verifier ships the rewritten test files to the sandbox; `harness/trialog_guard.py` does the comparing.
Only the source span of each comparison changes, and every newline is kept, so line numbers in pytest's
reports stay the task author's. Only single comparisons in `assert` statements are rewritten
(`assert a == b`, `assert a in b`); chained ones, `!=`, `<`, and comparisons outside asserts are left as
they are (see the guard's doc for what that leaves open).
"""

from __future__ import annotations

import ast

from actors.tasks.parsing import parse

GUARD = b'__import__("trialog_guard").'


def rewrite_asserts(source: bytes) -> bytes:
    """`source` with its guarded comparisons rewritten; unchanged if it does not parse."""
    try:
        tree = parse(source)
    except (SyntaxError, ValueError):
        return source  # pytest reports the file's error itself
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(lineno: int, col: int) -> int:
        return starts[lineno - 1] + col

    edits: list[tuple[int, int, bytes]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        test = node.test
        if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq | ast.In):
            continue
        left, right = test.left, test.comparators[0]
        assert left.end_lineno is not None and left.end_col_offset is not None
        assert test.end_lineno is not None and test.end_col_offset is not None
        start, end = offset(test.lineno, test.col_offset), offset(test.end_lineno, test.end_col_offset)
        left_end = offset(left.end_lineno, left.end_col_offset)
        right_start = offset(right.lineno, right.col_offset)
        between = _without_operator(source[left_end:right_start], isinstance(test.ops[0], ast.Eq))
        if between is None:
            continue
        name = b"eq" if isinstance(test.ops[0], ast.Eq) else b"contains"
        text = GUARD + name + b"(" + source[start:left_end] + between + source[right_start:end] + b")"
        edits.append((start, end, text))
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


def _without_operator(between: bytes, equals: bool) -> bytes | None:
    """The text between the operands with the operator replaced by a comma (comments dropped)."""
    out = bytearray()
    index, found = 0, False
    while index < len(between):
        char = between[index : index + 1]
        if char == b"#":
            while index < len(between) and between[index : index + 1] != b"\n":
                index += 1
            continue
        if not found and equals and between.startswith(b"==", index):
            out += b","
            index += 2
            found = True
            continue
        if not found and not equals and between.startswith(b"in", index):
            out += b","
            index += 2
            found = True
            continue
        out += char
        index += 1
    return bytes(out) if found else None
