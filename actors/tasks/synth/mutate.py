"""Candidate bugs of a Python module: small source-level edits ("mutations") found on its syntax tree.

`mutations(source, path)` lists every candidate of one library module, in source order; the pipeline
applies one at a time (`Mutation.apply`) and keeps it only when the project's own tests then fail.
`sample` is the order in which to try them, spread over modules and operators.

A mutation replaces one span of the source text and nothing else, so the rest of the file keeps its
formatting; it is listed only when the mutated module still compiles and differs from the original.
Spans are in characters (CPython's column offsets are UTF-8 bytes: they are converted).

What is never mutated, and why:
- test files (`is_test_path`): the tests are the judge, the bug goes into the library;
- docstrings and string-only expression statements (nothing computes there);
- annotations of arguments, returns and annotated assignments, decorators, default argument values, and
  class bases: they are part of the documented signature, so a change there reads against the
  docstring beside it instead of having to be found by its behaviour (defaults are also mostly
  sentinels such as `None`);
- `if __name__ == "__main__":` and `if TYPE_CHECKING:` blocks, and handlers of `except ImportError`
  (or `ModuleNotFoundError`): they do not run under the project's tests;
- assignments of dunder names (`__all__`, `__version__`, `__slots__`) at module or class level: metadata;
- `assert` statements: they check, they do not compute (and vanish under `python -O`);
- f-strings (positions inside them are unreliable before Python 3.12), and comparisons that test the
  running interpreter (`sys.version_info`, `sys.platform`): a change there only switches to code the
  tests of this interpreter do not run.

The operators and their rules:
- `binary-op`: one swap per operator site (`_BINARY_SWAPS`), augmented assignments included (`+=` ->
  `-=`); not where an operand is a string, f-string, list or tuple display (`"%s" % x`, `[a] + b`),
  whose swaps only make a `TypeError`;
- `compare`: `<` <-> `<=`, `>` <-> `>=`, `==` <-> `!=`, `is` <-> `is not`, `in` <-> `not in`;
- `bool-op`: each `and` <-> `or` token;
- `off-by-one`: an integer literal `n` (negative literals `-n` as one unit, never bools) becomes `n+1`
  and `n-1`, written as decimal literals; not the literals that are slice bounds (see `slice-bound`);
- `slice-bound`: a bound of `x[a:b]` that is an integer literal becomes `a+1` / `a-1`, another expression
  becomes `a + 1` / `a - 1` (unless it already ends in `+ k`/`- k`, whose `k` is `off-by-one`'s), and a
  bound is dropped (`x[1:]` -> `x[:]`); a missing lower bound becomes `1`, a missing upper one `-1`
  (only when there is no step); a lower bound that would become `0` is dropped instead;
- `drop-statement`: an expression statement (not a logging or `warnings.warn` call), assignment,
  augmented or annotated assignment with a value, or `raise` is removed with its lines when it has them
  to itself, otherwise replaced by `pass` (always when it is the only statement of its block);
- `drop-return`: `return <expr>` becomes `return None` (the expression's span is replaced); not when the
  expression is already `None`;
- `swap-args`: the first two positional arguments of a call, when neither is starred, their texts
  differ, and only a comma (and space or comments) separates them;
- `negate-condition`: the test of `if`/`elif`, `while`, a conditional expression and a comprehension's
  `if` becomes `not c` (`not (c)` unless `c` is a name, attribute, call or subscript); a test `not c`
  becomes `c`. Asserts are not negated (see above);
- `wrong-variable`: a read of a function's parameter or local variable becomes another parameter or local
  of the same function that is bound earlier in the source (parameters always are), the nearest three;
  `self` and `cls` are neither replaced nor used, and names bound by an enclosing lambda or comprehension,
  declared `global`/`nonlocal`, or bound only by `import`, `def`, `class`, `except ... as` or `match`
  are not candidates. "Earlier in the source" is an approximation of "bound when read": a name bound in
  one branch may still be unbound in another, which the project's tests then report.
"""

from __future__ import annotations

import ast
import hashlib
import random
import re
import warnings
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import PurePosixPath

from actors.tasks.parsing import parse
from actors.tasks.testids import is_test_file


class Operator(StrEnum):
    """The kinds of mutation; the values are recorded in task metadata, so they never change."""

    BINARY_OP = "binary-op"
    COMPARE = "compare"
    BOOL_OP = "bool-op"
    OFF_BY_ONE = "off-by-one"
    SLICE = "slice-bound"
    DROP_STATEMENT = "drop-statement"
    DROP_RETURN = "drop-return"
    SWAP_ARGS = "swap-args"
    NEGATE = "negate-condition"
    WRONG_VARIABLE = "wrong-variable"


class MutationError(ValueError):
    """A mutation that does not fit the source it is applied to."""


@dataclass(frozen=True)
class Mutation:
    operator: Operator
    path: str  # the module, relative to the project root, posix
    line: int  # 1-based line of the span's start
    end_line: int
    col: int  # character offsets within those lines
    end_col: int
    before: str  # the exact source text of the span
    after: str  # its replacement
    function: str | None  # qualified name of the enclosing function ("Foo.bar"), None outside functions

    @property
    def key(self) -> str:
        """A stable id: the same mutation of the same source always has the same key."""
        digest = hashlib.sha256(f"{self.end_line}:{self.end_col}\0{self.after}".encode()).hexdigest()
        return f"{self.path}:{self.line}:{self.col}:{self.operator}:{digest[:8]}"

    def describe(self) -> str:
        """For reviewers and metadata, never for the agent: it names the fix."""
        before, after = _brief(self.before), _brief(self.after)
        if not after:
            change = f"`{before}` removed"
        elif not before:
            change = f"`{after}` inserted"
        else:
            change = f"`{before}` -> `{after}`"
        inside = f" in `{self.function}`" if self.function else ""
        return f"{change}{inside} ({self.path}:{self.line})"

    def apply(self, source: str) -> str:
        """`source` with the span replaced; `MutationError` when the span's text is not `before`."""
        text = _Text(source)
        start = text.offset(self.line, self.col, self.path)
        end = text.offset(self.end_line, self.end_col, self.path)
        if source[start:end] != self.before:
            raise MutationError(
                f"{self.path}:{self.line}:{self.col}: expected {self.before!r} there, found "
                f"{source[start:end]!r}: the mutation was made for another version of this file"
            )
        return source[:start] + self.after + source[end:]


def is_test_path(path: str) -> bool:
    """`test_*.py`, `*_test.py`, `conftest.py`, or any file under a `tests`/`test` folder."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not parts:
        return False
    name = parts[-1]
    return (
        name == "conftest.py" or is_test_file(name) or any(part in ("tests", "test") for part in parts[:-1])
    )


def mutations(source: str, path: str) -> list[Mutation]:
    """Every mutation of the module `source` (at `path`, relative to the project root), in source order."""
    if is_test_path(path):
        raise ValueError(f"{path}: a test file; mutations are made in library code only")
    try:
        tree = parse(source, filename=path)
    except SyntaxError as error:
        raise ValueError(
            f"{path}: not valid Python ({error.msg}, line {error.lineno}); fix or skip it"
        ) from None
    text = _Text(source)
    finder = _Finder(text)
    finder.block(tree.body, _Context(function=None, qualname=(), top_level=True, scope=None))
    order = {operator: index for index, operator in enumerate(Operator)}
    checker = _Checker(tree, text, path)
    found: list[Mutation] = []
    seen: set[bytes] = set()
    for edit in sorted(set(finder.edits), key=lambda e: (e.start, e.end, order[e.operator], e.after)):
        if source[edit.start : edit.end] == edit.after:
            continue
        digest = hashlib.sha256(
            f"{edit.start}:{edit.end}\0".encode() + edit.after.encode("utf-8", "surrogatepass")
        )
        if digest.digest() in seen or not checker.compiles(edit):
            continue
        seen.add(digest.digest())
        found.append(text.mutation(edit, path))
    return found


def sample(by_module: Mapping[str, Sequence[Mutation]], limit: int | None, seed: int) -> list[Mutation]:
    """The order in which to try mutations: each module's shuffled by `seed`, then taken in turn from the
    modules (sorted by path) and, within a module, in turn from its operators (in the order the shuffle
    first meets them). `limit` caps the total; the same inputs give the same order."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be at least 0 (or None for all), not {limit}")
    streams = [_interleaved_by_operator(by_module[path], f"{seed}:{path}") for path in sorted(by_module)]
    order = list(_round_robin(streams))
    return order if limit is None else order[:limit]


def _interleaved_by_operator(module: Sequence[Mutation], seed: str) -> Iterator[Mutation]:
    shuffled = list(module)
    random.Random(seed).shuffle(shuffled)
    by_operator: dict[Operator, list[Mutation]] = {}
    for mutation in shuffled:
        by_operator.setdefault(mutation.operator, []).append(mutation)
    return _round_robin([iter(group) for group in by_operator.values()])


def _round_robin(streams: Iterable[Iterator[Mutation]]) -> Iterator[Mutation]:
    live = list(streams)
    while live:
        still: list[Iterator[Mutation]] = []
        for stream in live:
            item = next(stream, None)
            if item is not None:
                yield item
                still.append(stream)
        live = still


# ---------------------------------------------------------------------------------------------- text

_NEWLINE = re.compile(r"\r\n|\r|\n")  # the line breaks CPython's tokenizer counts


class _Text:
    """The source with conversions between AST positions, character offsets and (line, column)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self._starts = [0, *(match.end() for match in _NEWLINE.finditer(source))]
        self._encoded: dict[int, bytes] = {}

    def _line(self, line: int) -> str:
        end = self._starts[line] if line < len(self._starts) else len(self.source)
        return self.source[self._starts[line - 1] : end]

    def at(self, line: int, byte_col: int) -> int:
        encoded = self._encoded.get(line)
        if encoded is None:
            encoded = self._encoded[line] = self._line(line).encode("utf-8", "surrogatepass")
        return self._starts[line - 1] + len(encoded[:byte_col].decode("utf-8", "surrogatepass"))

    def start(self, node: ast.expr | ast.stmt) -> int:
        return self.at(node.lineno, node.col_offset)

    def end(self, node: ast.expr | ast.stmt) -> int:
        if node.end_lineno is None or node.end_col_offset is None:  # only trees built by hand lack them
            raise ValueError(f"{type(node).__name__} node without an end position")
        return self.at(node.end_lineno, node.end_col_offset)

    def of(self, node: ast.expr | ast.stmt) -> str:
        return self.source[self.start(node) : self.end(node)]

    def line_start(self, offset: int) -> int:
        return self._starts[bisect_right(self._starts, offset) - 1]

    def next_line_start(self, offset: int) -> int:
        index = bisect_right(self._starts, offset)
        return self._starts[index] if index < len(self._starts) else len(self.source)

    def offset(self, line: int, col: int, path: str) -> int:
        if not 1 <= line <= len(self._starts) or not 0 <= col <= len(self._line(line)):
            raise MutationError(
                f"{path}: no position {line}:{col} in this source ({len(self._starts)} lines)"
            )
        return self._starts[line - 1] + col

    def position(self, offset: int) -> tuple[int, int]:
        index = bisect_right(self._starts, offset) - 1
        return index + 1, offset - self._starts[index]

    def mutation(self, edit: _Edit, path: str) -> Mutation:
        line, col = self.position(edit.start)
        end_line, end_col = self.position(edit.end)
        return Mutation(
            operator=edit.operator,
            path=path,
            line=line,
            end_line=end_line,
            col=col,
            end_col=end_col,
            before=self.source[edit.start : edit.end],
            after=edit.after,
            function=edit.function,
        )


def _brief(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class _Checker:
    """Whether a mutated module still compiles, checked on the smallest segment that holds the edit: a
    top-level statement, or a statement of a top-level class (compiled inside a stand-in `class _:`),
    with the module's `__future__` imports. A mutation cannot break what lies outside its statement, and
    compiling one method instead of the module for each of a module's thousand mutants keeps this fast."""

    def __init__(self, tree: ast.Module, text: _Text, path: str) -> None:
        self._text, self._path = text, path
        # (start, end, the indentation of a class member, or None for a top-level statement)
        self._segments: list[tuple[int, int, str | None]] = []
        for statement in tree.body:
            self._segments.append((*self._lines_of(statement), None))
            if isinstance(statement, ast.ClassDef):
                for member in statement.body:
                    start, end = self._lines_of(member)
                    indent = text.source[start : text.start(member)]
                    if indent.isspace():  # on lines of its own
                        self._segments.append((start, end, indent))
        self._future = "".join(
            text.of(statement) + "\n"
            for statement in tree.body
            if isinstance(statement, ast.ImportFrom) and statement.module == "__future__"
        )

    def _lines_of(self, statement: ast.stmt) -> tuple[int, int]:
        first = min([statement, *getattr(statement, "decorator_list", [])], key=self._text.start)
        return self._text.line_start(self._text.start(first)), self._text.next_line_start(
            self._text.end(statement)
        )

    def compiles(self, edit: _Edit) -> bool:
        source = self._text.source
        index = bisect_right(self._segments, (edit.start, len(source) + 1, "\U0010ffff")) - 1
        start, end, indent = 0, len(source), None
        while index >= 0:
            candidate = self._segments[index]
            if candidate[0] <= edit.start <= edit.end <= candidate[1]:
                start, end, indent = candidate
                break
            index -= 1
        segment = self._future + source[start : edit.start] + edit.after + source[edit.end : end]
        if indent is not None:  # the member stays a member, and its class has a body if it is dropped
            segment = f"class _:\n{segment}\n{indent}pass\n"
        # compile, not just parse: the symbol table rejects some mutants that parse (a `nonlocal` name
        # whose only binding was dropped). Warnings (the original's invalid escapes, `is` with a literal)
        # are noise here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                compile(segment, self._path, "exec", dont_inherit=True)
            except (SyntaxError, ValueError):
                return False
        return True


# ----------------------------------------------------------------------------------------- the finder


@dataclass(frozen=True)
class _Edit:
    operator: Operator
    start: int  # character offsets into the source
    end: int
    after: str
    function: str | None


@dataclass(frozen=True)
class _Context:
    function: str | None  # the enclosing function's qualified name
    qualname: tuple[str, ...]
    top_level: bool  # a module or class body, where dunder assignments are metadata
    scope: _FunctionScope | None  # the enclosing function's bindings, for wrong-variable
    shadowed: frozenset[str] = frozenset()  # names bound by an enclosing lambda or comprehension

    def shadow(self, names: Iterable[str]) -> _Context:
        return replace(self, shadowed=self.shadowed | frozenset(names))


_BINARY_SYMBOLS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.MatMult: "@",
}
_BINARY_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_COMPARE_TOKENS: dict[type[ast.cmpop], tuple[str, str]] = {  # (pattern of the token, its replacement)
    ast.Lt: (r"<", "<="),
    ast.LtE: (r"<=", "<"),
    ast.Gt: (r">", ">="),
    ast.GtE: (r">=", ">"),
    ast.Eq: (r"==", "!="),
    ast.NotEq: (r"!=", "=="),
    ast.Is: (r"is\b(?!\s+not\b)", "is not"),
    ast.IsNot: (r"is\s+not\b", "is"),
    ast.In: (r"in\b", "not in"),
    ast.NotIn: (r"not\s+in\b", "in"),
}
_NON_NUMERIC = (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp)
_TIGHTER_THAN_PLUS = (ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.MatMult, ast.Pow)
_SIMPLE = (ast.Name, ast.Attribute, ast.Call, ast.Subscript)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_ENVIRONMENT = frozenset({"version_info", "platform", "hexversion", "PY2", "PY3"})
_LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log"}
)
_SKIPPED_FIELDS: dict[type[ast.AST], frozenset[str]] = {
    ast.Lambda: frozenset({"args"}),
    ast.AnnAssign: frozenset({"annotation"}),
    ast.ExceptHandler: frozenset({"type"}),
}
_MAX_WRONG_VARIABLES = 3


class _Finder:
    """Walks a module's tree and collects the edits; the skipped regions are never entered."""

    def __init__(self, text: _Text) -> None:
        self.text = text
        self.edits: list[_Edit] = []

    def _add(self, operator: Operator, start: int, end: int, after: str, ctx: _Context) -> None:
        self.edits.append(_Edit(operator, start, end, after, ctx.function))

    def block(self, statements: Sequence[ast.stmt], ctx: _Context) -> None:
        for statement in statements:
            if self._skipped_statement(statement, ctx):
                continue
            if _droppable(statement):
                self._drop(statement, statements, ctx)
            self.visit(statement, ctx)

    def visit(self, node: ast.AST, ctx: _Context) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            qualname = (*ctx.qualname, node.name)
            inner = _Context(".".join(qualname), qualname, False, _FunctionScope(node, self.text))
            self.block(node.body, inner)
            return
        if isinstance(node, ast.ClassDef):
            self.block(node.body, _Context(ctx.function, (*ctx.qualname, node.name), True, None))
            return
        if isinstance(node, (ast.JoinedStr, ast.Assert)):
            return
        if isinstance(node, ast.Compare) and _tests_environment(node):
            return
        if isinstance(node, ast.Lambda):
            ctx = ctx.shadow(argument.arg for argument in _arguments(node.args))
        elif isinstance(node, _COMPREHENSIONS):
            ctx = ctx.shadow(_stored_names(generator.target for generator in node.generators))
        elif isinstance(node, (ast.Try, ast.TryStar)):
            node = _without_import_fallbacks(node)
        if not self._visit_special(node, ctx):
            self._mutate(node, ctx)
            self._children(node, ctx)

    def _children(self, node: ast.AST, ctx: _Context, skip: Iterable[ast.AST] = ()) -> None:
        skipped_fields = _SKIPPED_FIELDS.get(type(node), frozenset())
        skipped_nodes = {id(child) for child in skip}
        for field, value in ast.iter_fields(node):
            if field in skipped_fields:
                continue
            if isinstance(value, list) and value and all(isinstance(item, ast.stmt) for item in value):
                self.block(value, ctx)
                continue
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST) and id(child) not in skipped_nodes:
                    self.visit(child, ctx)

    def _skipped_statement(self, statement: ast.stmt, ctx: _Context) -> bool:
        if isinstance(statement, ast.If) and (
            _is_main_guard(statement.test) or _is_type_checking(statement.test)
        ):
            return True
        return ctx.top_level and _assigns_dunders(statement)

    def _visit_special(self, node: ast.AST, ctx: _Context) -> bool:
        """Nodes whose parts are mutated as a unit; True when their children were handled here."""
        if isinstance(node, ast.UnaryOp) and _int_literal(node) is not None:
            self._off_by_one(node, ctx, parenthesize_negative=False)
            return True
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and _int_literal(node.left) is not None
        ):
            self._mutate(node, ctx)
            self._off_by_one(node.left, ctx, parenthesize_negative=True)
            self._children(node, ctx, skip=[node.left])
            return True
        if isinstance(node, ast.Slice):
            self._slice(node, ctx)
            literals = [
                bound for bound in (node.lower, node.upper, node.step) if _int_literal(bound) is not None
            ]
            self._children(node, ctx, skip=[bound for bound in literals if bound is not None])
            return True
        return False

    # -- one method per kind of node -----------------------------------------------------------------

    def _mutate(self, node: ast.AST, ctx: _Context) -> None:
        if isinstance(node, ast.BinOp):
            self._binary(node.left, node.right, node.op, "", ctx)
        elif isinstance(node, ast.AugAssign):
            self._binary(node.target, node.value, node.op, "=", ctx)
        elif isinstance(node, ast.Compare):
            self._compare(node, ctx)
        elif isinstance(node, ast.BoolOp):
            word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            for left, right in zip(node.values, node.values[1:], strict=False):
                self._token(Operator.BOOL_OP, left, right, rf"{word}\b", other, ctx)
        elif isinstance(node, ast.Constant) and _int_literal(node) is not None:
            self._off_by_one(node, ctx, parenthesize_negative=False)
        elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
            self._add(
                Operator.DROP_RETURN, self.text.start(node.value), self.text.end(node.value), "None", ctx
            )
        elif isinstance(node, ast.Call):
            self._swap_args(node, ctx)
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            if not (isinstance(node.test, ast.Compare) and _tests_environment(node.test)):
                self._negate(node.test, ctx)
        elif isinstance(node, ast.comprehension):
            for condition in node.ifs:
                self._negate(condition, ctx)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self._wrong_variable(node, ctx)

    def _binary(self, left: ast.expr, right: ast.expr, op: ast.operator, suffix: str, ctx: _Context) -> None:
        swap = _BINARY_SWAPS.get(type(op))
        if swap is None or any(_is_text(operand) for operand in (left, right)):
            return
        symbol = _BINARY_SYMBOLS[type(op)] + suffix
        self._token(Operator.BINARY_OP, left, right, re.escape(symbol), _BINARY_SYMBOLS[swap] + suffix, ctx)

    def _compare(self, node: ast.Compare, ctx: _Context) -> None:
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            pattern, replacement = _COMPARE_TOKENS[type(op)]
            self._token(Operator.COMPARE, left, right, pattern, replacement, ctx)

    def _token(
        self, operator: Operator, left: ast.expr, right: ast.expr, pattern: str, after: str, ctx: _Context
    ) -> None:
        """Replaces the operator token between two operands (found past parentheses and comments)."""
        gap_start, gap_end = self.text.end(left), self.text.start(right)
        position = _token_position(self.text.source, gap_start, gap_end)
        if position is None:
            return
        match = re.compile(pattern).match(self.text.source, position, gap_end)
        if match is not None:
            self._add(operator, match.start(), match.end(), after, ctx)

    def _off_by_one(self, node: ast.expr, ctx: _Context, *, parenthesize_negative: bool) -> None:
        value = _int_literal(node)
        if value is None:
            return
        start, end = self.text.start(node), self.text.end(node)
        for changed in (value + 1, value - 1):
            written = f"({changed})" if changed < 0 and parenthesize_negative else str(changed)
            self._add(Operator.OFF_BY_ONE, start, end, written, ctx)

    def _slice(self, node: ast.Slice, ctx: _Context) -> None:
        for bound, is_lower in ((node.lower, True), (node.upper, False)):
            if bound is None:
                continue
            start, end = self.text.start(bound), self.text.end(bound)
            changed = self._moved_bound(bound)
            for after in [*changed, ""]:
                self._add(Operator.SLICE, start, end, "" if is_lower and after == "0" else after, ctx)
        if node.lower is None:
            self._add(Operator.SLICE, self.text.start(node), self.text.start(node), "1", ctx)
        if node.upper is None and node.step is None:
            after_lower = self.text.end(node.lower) if node.lower is not None else self.text.start(node)
            if self.text.source[after_lower : self.text.end(node)].strip() == ":":
                self._add(Operator.SLICE, self.text.end(node), self.text.end(node), "-1", ctx)

    def _moved_bound(self, bound: ast.expr) -> list[str]:
        value = _int_literal(bound)
        if value is not None:
            return [str(value + 1), str(value - 1)]
        if isinstance(bound, ast.BinOp) and isinstance(bound.op, (ast.Add, ast.Sub)):
            if _int_literal(bound.right) is not None:
                return []  # `n - 1` -> `n - 2`, `n`: off-by-one's, on the literal
            operand = self.text.of(bound)
        elif isinstance(bound, (*_SIMPLE, ast.Constant)) or (
            isinstance(bound, ast.BinOp) and isinstance(bound.op, _TIGHTER_THAN_PLUS)
        ):
            operand = self.text.of(bound)
        else:
            operand = f"({self.text.of(bound)})"
        return [f"{operand} + 1", f"{operand} - 1"]

    def _drop(self, statement: ast.stmt, block: Sequence[ast.stmt], ctx: _Context) -> None:
        start, end = self.text.start(statement), self.text.end(statement)
        if len(block) > 1:
            source = self.text.source
            line_start, next_line = self.text.line_start(start), self.text.next_line_start(end)
            rest = source[end:next_line].strip()
            if not source[line_start:start].strip() and (not rest or rest.startswith("#")):
                self._add(Operator.DROP_STATEMENT, line_start, next_line, "", ctx)
                return
        self._add(Operator.DROP_STATEMENT, start, end, "pass", ctx)

    def _swap_args(self, node: ast.Call, ctx: _Context) -> None:
        if len(node.args) < 2 or any(isinstance(arg, ast.Starred) for arg in node.args[:2]):
            return
        first, second = node.args[0], node.args[1]
        first_text, second_text = self.text.of(first), self.text.of(second)
        between = self.text.source[self.text.end(first) : self.text.start(second)]
        if first_text == second_text or _without_comments(between).strip() != ",":
            return
        after = second_text + between + first_text
        self._add(Operator.SWAP_ARGS, self.text.start(first), self.text.end(second), after, ctx)

    def _negate(self, test: ast.expr, ctx: _Context) -> None:
        start, end = self.text.start(test), self.text.end(test)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            # keep the operand's own parentheses: `not (a or b)` -> `(a or b)`
            after = self.text.source[start:end].removeprefix("not").strip()
        elif isinstance(test, _SIMPLE):
            after = f"not {self.text.of(test)}"
        else:
            after = f"not ({self.text.of(test)})"
        self._add(Operator.NEGATE, start, end, after, ctx)

    def _wrong_variable(self, node: ast.Name, ctx: _Context) -> None:
        if ctx.scope is None or node.id in ctx.shadowed or node.id not in ctx.scope.bound_at:
            return
        start, end = self.text.start(node), self.text.end(node)
        for name in ctx.scope.candidates(node.id, start, ctx.shadowed):
            self._add(Operator.WRONG_VARIABLE, start, end, name, ctx)


class _FunctionScope:
    """A function's parameters and local variables, with the offset from which each is bound."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, text: _Text) -> None:
        self.bound_at: dict[str, int] = {}
        for argument in _arguments(node.args):
            self._bind(argument.arg, -1)
        declared: set[str] = set()
        pending: list[ast.AST] = list(node.body)
        bindings: list[tuple[int, str]] = []
        while pending:
            child = pending.pop()
            if isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, *_COMPREHENSIONS)
            ):
                continue
            if isinstance(child, (ast.Global, ast.Nonlocal)):
                declared.update(child.names)
            elif isinstance(child, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                bindings += [(text.end(child), name) for name in _stored_names(targets)]
            elif isinstance(child, (ast.For, ast.AsyncFor)):
                bindings += [(text.end(child.target), name) for name in _stored_names([child.target])]
            elif isinstance(child, ast.withitem) and child.optional_vars is not None:
                bindings += [
                    (text.end(child.optional_vars), name) for name in _stored_names([child.optional_vars])
                ]
            elif isinstance(child, ast.NamedExpr):
                bindings += [(text.end(child), child.target.id)]
            pending.extend(ast.iter_child_nodes(child))
        for offset, name in sorted(bindings):
            self._bind(name, offset)
        for name in declared:
            self.bound_at.pop(name, None)

    def _bind(self, name: str, offset: int) -> None:
        if name not in ("self", "cls"):
            self.bound_at.setdefault(name, offset)

    def candidates(self, used: str, offset: int, shadowed: frozenset[str]) -> list[str]:
        """The nearest names bound before `offset`, other than `used`."""
        order = {name: index for index, name in enumerate(self.bound_at)}
        earlier = [
            name
            for name, at in self.bound_at.items()
            if name != used and name not in shadowed and at <= offset
        ]
        earlier.sort(key=lambda name: (-self.bound_at[name], order[name]))
        return earlier[:_MAX_WRONG_VARIABLES]


# ---------------------------------------------------------------------------------------- predicates


def _int_literal(node: ast.AST | None) -> int | None:
    """The value of an integer literal `n` or `-n` (never a bool)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_literal(node.operand)
        return None if inner is None or not isinstance(node.operand, ast.Constant) else -inner
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    return None


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, _NON_NUMERIC) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


def _droppable(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Expr):
        return not isinstance(statement.value, ast.Constant) and not _is_logging(statement.value)
    if isinstance(statement, ast.AnnAssign):
        return statement.value is not None
    return isinstance(statement, (ast.Assign, ast.AugAssign, ast.Raise))


def _is_logging(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if isinstance(function, ast.Name):
        return function.id == "warn"
    if not isinstance(function, ast.Attribute):
        return False
    owner = function.value
    owner_name = (
        owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
    )
    if owner_name == "warnings":
        return function.attr == "warn"
    lowered = owner_name.lower().lstrip("_")
    return function.attr in _LOG_METHODS and (lowered in ("log", "logging") or lowered.endswith("logger"))


def _is_main_guard(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [side.id for side in sides if isinstance(side, ast.Name)]
    values = [side.value for side in sides if isinstance(side, ast.Constant)]
    return names == ["__name__"] and values == ["__main__"]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _tests_environment(node: ast.Compare) -> bool:
    return any(
        (isinstance(part, ast.Attribute) and part.attr in _ENVIRONMENT)
        or (isinstance(part, ast.Name) and part.id in _ENVIRONMENT)
        for part in ast.walk(node)
    )


def _assigns_dunders(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        targets = [statement.target]
    else:
        return False
    names = [target.id for target in targets if isinstance(target, ast.Name)]
    return len(names) == len(targets) and all(name.startswith("__") and name.endswith("__") for name in names)


def _without_import_fallbacks(node: ast.Try | ast.TryStar) -> ast.Try | ast.TryStar:
    """The same `try` without its `except ImportError` handlers (a copy: the tree is not changed)."""
    kept = [handler for handler in node.handlers if not _catches_import_error(handler)]
    copy = type(node)(body=node.body, handlers=kept, orelse=node.orelse, finalbody=node.finalbody)
    return ast.copy_location(copy, node)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(
        isinstance(kind, (ast.Name, ast.Attribute))
        and (kind.id if isinstance(kind, ast.Name) else kind.attr) in ("ImportError", "ModuleNotFoundError")
        for kind in caught
    )


def _arguments(arguments: ast.arguments) -> list[ast.arg]:
    extra = [argument for argument in (arguments.vararg, arguments.kwarg) if argument is not None]
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, *extra]


def _stored_names(targets: Iterable[ast.AST]) -> list[str]:
    return [
        node.id
        for target in targets
        for node in ast.walk(target)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)
    ]


def _token_position(source: str, start: int, end: int) -> int | None:
    """The first offset in `source[start:end]` past spaces, parentheses, comments and line joins."""
    position = start
    while position < end:
        char = source[position]
        if char == "#":
            newline = _NEWLINE.search(source, position, end)
            position = end if newline is None else newline.end()
        elif char in " \t\f\r\n()\\":
            position += 1
        else:
            return position
    return None


def _without_comments(text: str) -> str:
    return re.sub(r"#[^\r\n]*", "", text)
