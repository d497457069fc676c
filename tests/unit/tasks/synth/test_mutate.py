from __future__ import annotations

import bisect
import fractions
import heapq
import inspect
import itertools
import json.decoder
import textwrap
from collections import Counter
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.tasks.synth.mutate import Mutation, MutationError, Operator, is_test_path, mutations, sample

PATH = "pkg/mod.py"


def found(source: str, operator: Operator) -> list[tuple[int, int, str, str]]:
    return [(m.line, m.col, m.before, m.after) for m in mutations(source, PATH) if m.operator is operator]


def only(source: str, operator: Operator) -> Mutation:
    (mutation,) = [m for m in mutations(source, PATH) if m.operator is operator]
    return mutation


# ------------------------------------------------------------------------------------ one per operator


def test_binary_op_swaps_each_operator_once() -> None:
    source = "def f(a, b):\n    return (a) * b + a // 2 - (b % 3)\n"
    assert found(source, Operator.BINARY_OP) == [
        (2, 15, "*", "/"),
        (2, 19, "+", "-"),
        (2, 23, "//", "/"),
        (2, 28, "-", "+"),
        (2, 33, "%", "//"),
    ]
    mutation = next(m for m in mutations(source, PATH) if m.after == "/" and m.before == "//")
    assert mutation.apply(source) == "def f(a, b):\n    return (a) * b + a / 2 - (b % 3)\n"


def test_binary_op_covers_augmented_assignment_and_skips_text_operands() -> None:
    source = 'def f(a, b):\n    a <<= b\n    return "%s" % a + "!"\n'
    assert found(source, Operator.BINARY_OP) == [(2, 6, "<<=", ">>=")]


def test_compare_swaps_each_operator() -> None:
    source = "def f(a, b):\n    return a < b <= 3 and a is not None and a not in b and a == b\n"
    assert found(source, Operator.COMPARE) == [
        (2, 13, "<", "<="),
        (2, 17, "<=", "<"),
        (2, 28, "is not", "is"),
        (2, 46, "not in", "in"),
        (2, 61, "==", "!="),
    ]
    negated_is = next(m for m in mutations(source, PATH) if m.before == "is not")
    assert "a is None" in negated_is.apply(source)


def test_bool_op_swaps_each_token() -> None:
    source = "def f(a, b, c):\n    return a and (b) and c or a\n"
    assert found(source, Operator.BOOL_OP) == [
        (2, 13, "and", "or"),
        (2, 21, "and", "or"),
        (2, 27, "or", "and"),
    ]


def test_off_by_one_on_integer_literals_not_bools_nor_slice_bounds() -> None:
    source = "def f(x):\n    return g(x, 10, -1, True, 2.5) + x[3]\n"
    assert found(source, Operator.OFF_BY_ONE) == [
        (2, 16, "10", "11"),
        (2, 16, "10", "9"),
        (2, 20, "-1", "-2"),
        (2, 20, "-1", "0"),
        (2, 39, "3", "2"),
        (2, 39, "3", "4"),
    ]
    assert found("def f(x):\n    return x[1:2]\n", Operator.OFF_BY_ONE) == []


def test_off_by_one_keeps_a_negative_base_of_a_power_negative() -> None:
    mutated = [m.apply("y = 0 ** 2\n") for m in mutations("y = 0 ** 2\n", PATH) if m.col == 4]
    assert mutated == ["y = (-1) ** 2\n", "y = 1 ** 2\n"]


def test_slice_bounds_move_drop_and_appear() -> None:
    assert found("def f(x, n):\n    return x[1:n]\n", Operator.SLICE) == [
        (2, 13, "1", ""),
        (2, 13, "1", "2"),
        (2, 15, "n", ""),
        (2, 15, "n", "n + 1"),
        (2, 15, "n", "n - 1"),
    ]
    assert found("def f(x):\n    return x[:-1]\n", Operator.SLICE) == [
        (2, 13, "", "1"),
        (2, 14, "-1", ""),
        (2, 14, "-1", "-2"),
        (2, 14, "-1", "0"),
    ]
    appended = found("def f(x, a, b):\n    return x[a << b:]\n", Operator.SLICE)
    assert (2, 13, "a << b", "(a << b) + 1") in appended
    assert (2, 20, "", "-1") in appended
    # `n - 1` moves by its literal (off-by-one), not by a second `- 1`
    assert found("def f(x, n):\n    return x[n - 1:]\n", Operator.SLICE) == [
        (2, 13, "n - 1", ""),
        (2, 19, "", "-1"),
    ]


def test_drop_statement_removes_lines_or_leaves_pass() -> None:
    source = (
        "def f(x):\n    y = x  # keep\n    y += 1; z = y\n    if y:\n        raise ValueError(y)\n"
        "    return y\n"
    )
    drops = [m for m in mutations(source, PATH) if m.operator is Operator.DROP_STATEMENT]
    assert [(m.before, m.after) for m in drops] == [
        ("    y = x  # keep\n", ""),
        ("y += 1", "pass"),
        ("z = y", "pass"),
        ("raise ValueError(y)", "pass"),
    ]
    assert (
        drops[0].apply(source)
        == "def f(x):\n    y += 1; z = y\n    if y:\n        raise ValueError(y)\n    return y\n"
    )
    assert (drops[0].line, drops[0].col, drops[0].end_line, drops[0].end_col) == (2, 0, 3, 0)


def test_drop_statement_spares_logging_warnings_and_docstrings() -> None:
    source = (
        "import logging, warnings\nlogger = logging.getLogger(__name__)\n\n"
        "def f(x):\n    'Doc.'\n    logger.debug('x %s', x)\n    warnings.warn('old')\n"
        "    log.info(x)\n    g(x)\n"
    )
    assert [m.before.strip() for m in mutations(source, PATH) if m.operator is Operator.DROP_STATEMENT] == [
        "logger = logging.getLogger(__name__)",
        "g(x)",
    ]


def test_drop_return_returns_none_instead() -> None:
    source = "def f(x):\n    if x:\n        return None\n    return x + 1\n"
    mutation = only(source, Operator.DROP_RETURN)
    assert (mutation.line, mutation.col, mutation.before, mutation.after) == (4, 11, "x + 1", "None")
    assert mutation.apply(source).endswith("    return None\n")


def test_swap_args_swaps_the_first_two_positional_arguments_when_they_differ() -> None:
    source = "def f(a, b):\n    g(a, b, 3)\n    g(a, a)\n    g(*a, b)\n    g(a, key=b)\n    g((a), b)\n"
    assert found(source, Operator.SWAP_ARGS) == [(2, 6, "a, b", "b, a")]


def test_negate_condition_on_if_while_ternary_and_comprehension_not_assert() -> None:
    source = (
        "def f(a, b):\n    if a.ok():\n        pass\n    while not b:\n        pass\n"
        "    assert a\n    x = 1 if a < b else 2\n    return [y for y in b if y or a]\n"
    )
    assert found(source, Operator.NEGATE) == [
        (2, 7, "a.ok()", "not a.ok()"),
        (4, 10, "not b", "b"),
        (7, 13, "a < b", "not (a < b)"),
        (8, 28, "y or a", "not (y or a)"),
    ]


def test_wrong_variable_uses_earlier_locals_and_parameters_only() -> None:
    source = "import os\n\ndef f(self, a, b):\n    c = a + len(b)\n    return os.sep.join([c, b, a, self])\n"
    assert found(source, Operator.WRONG_VARIABLE) == [
        (4, 8, "a", "b"),
        (4, 16, "b", "a"),
        (5, 24, "c", "a"),
        (5, 24, "c", "b"),
        (5, 27, "b", "a"),
        (5, 27, "b", "c"),
        (5, 30, "a", "b"),
        (5, 30, "a", "c"),
    ]


def test_wrong_variable_respects_shadowing_and_declarations() -> None:
    source = (
        "def f(a, b):\n    global g\n    g = a\n    h = lambda b: b + a\n    return [b for a in b] + [g]\n"
    )
    uses = found(source, Operator.WRONG_VARIABLE)
    assert (3, 8, "a", "b") in uses
    assert all(after != "g" and before != "g" for _, _, before, after in uses)
    # inside the lambda `b` is its own parameter: not replaced, and not a replacement for `a` (nor is
    # `h`, bound only once the statement ends, nor `g`, declared global)
    assert [use for use in uses if use[0] == 4] == []
    # in the comprehension `a` is the comprehension's: only `b` (the iterable) may change, never to `a`
    assert [(before, after) for line, _, before, after in uses if line == 5] == [("b", "h")] * 2


# ------------------------------------------------------------------------------------------- skipped


SKIPPED = '''\
"""Module docstring with 1 < 2."""
from typing import TYPE_CHECKING
__all__ = ["f"]
__version__ = "1" + "2"

try:
    import fast
except ImportError:
    fast = None
    x = 1 + 2

if TYPE_CHECKING:
    y = 1 + 2


@decorate(1 + 2)
def f(a: int = 1 + 2, *, b: "list[int]" = [3]) -> dict[str, int]:
    """Docstring with a + b."""
    c: int = 4
    assert a < b
    if sys.version_info >= (3, 8):
        pass
    return f"{a + 1}"


if __name__ == "__main__":
    print(1 + 2)
'''


def test_skipped_regions_are_never_mutated() -> None:
    # only the annotated assignment's value and statement, and the return (not inside its f-string)
    assert [(m.line, m.operator, m.after) for m in mutations(SKIPPED, PATH)] == [
        (19, Operator.DROP_STATEMENT, ""),
        (19, Operator.OFF_BY_ONE, "3"),
        (19, Operator.OFF_BY_ONE, "5"),
        (23, Operator.DROP_RETURN, "None"),
    ]


def test_test_files_are_refused() -> None:
    for path in (
        "tests/test_x.py",
        "pkg/test_x.py",
        "pkg/x_test.py",
        "conftest.py",
        "pkg/tests/helpers.py",
        "test/a.py",
    ):
        assert is_test_path(path)
        with pytest.raises(ValueError, match="test file"):
            mutations("x = 1\n", path)
    for path in ("toolz/itertoolz.py", "pkg/testing.py", "contest.py", "attest/x.py"):
        assert not is_test_path(path)


def test_invalid_source_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"pkg/mod.py: not valid Python"):
        mutations("def f(:\n", PATH)


# ----------------------------------------------------------------------------------------- positions


def test_columns_are_characters_after_non_ascii_text_on_the_same_line() -> None:
    source = 'def f(a, b):\n    s = "héllo 日本 🐍"; return a + b\n'
    mutation = only(source, Operator.BINARY_OP)
    assert (mutation.line, mutation.col, mutation.end_col) == (2, 31, 32)  # 39 and 40 in bytes
    assert source.splitlines()[1][mutation.col] == "+"
    assert mutation.apply(source) == 'def f(a, b):\n    s = "héllo 日本 🐍"; return a - b\n'


@settings(max_examples=60, deadline=None)
@given(
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12), st.sampled_from(["\n", "\r\n"])
)
def test_any_text_before_a_site_keeps_the_span_exact(prefix: str, newline: str) -> None:
    source = f"def f(a, b):{newline}    s = {prefix!r}; return (a) < b{newline}"
    mutation = only(source, Operator.COMPARE)
    assert (mutation.before, mutation.after) == ("<", "<=")
    assert mutation.apply(source) == source.replace(") < b", ") <= b")


def test_apply_refuses_another_version_of_the_file() -> None:
    mutation = only("def f(a, b):\n    return a < b\n", Operator.COMPARE)
    with pytest.raises(MutationError, match="expected '<'"):
        mutation.apply("def f(a, b):\n    return a == b\n")
    with pytest.raises(MutationError, match="no position"):
        mutation.apply("x = 1\n")


def test_key_and_describe() -> None:
    source = "def take(n, seq):\n    return n < seq\n"
    mutation = only(source, Operator.COMPARE)
    assert mutation.function == "take"
    assert mutation.describe() == "`<` -> `<=` in `take` (pkg/mod.py:2)"
    assert mutation.key.startswith("pkg/mod.py:2:13:compare:") and len(mutation.key.rsplit(":", 1)[1]) == 8
    assert mutation.key == only(source, Operator.COMPARE).key
    method = only("class A:\n    def m(self, a):\n        return a.x\n", Operator.DROP_RETURN)
    assert method.function == "A.m"
    dropped = next(m for m in mutations("def f(x):\n    y = x\n    return y\n", PATH) if m.after == "")
    assert dropped.describe() == "`y = x` removed in `f` (pkg/mod.py:2)"
    inserted = next(m for m in mutations("def f(x):\n    return x[:2]\n", PATH) if m.before == "")
    assert inserted.describe() == "`1` inserted in `f` (pkg/mod.py:2)"


# ------------------------------------------------------------------------------------------- corpus

CORPUS: list[ModuleType] = [textwrap, fractions, heapq, bisect, json.decoder]


@pytest.fixture(scope="module")
def corpus() -> dict[str, tuple[str, list[Mutation]]]:
    sources = {module.__name__.replace(".", "/") + ".py": inspect.getsource(module) for module in CORPUS}
    return {path: (source, mutations(source, path)) for path, source in sources.items()}


def test_corpus_mutations_apply_parse_and_change_only_their_span(
    corpus: dict[str, tuple[str, list[Mutation]]],
) -> None:
    for path, (source, found_here) in corpus.items():
        assert found_here == sorted(found_here, key=lambda m: (m.line, m.col))
        assert len({m.key for m in found_here}) == len(found_here)
        line_starts = [0, *itertools.accumulate(len(line) for line in source.splitlines(keepends=True))]
        for index, mutation in enumerate(found_here):
            mutated = mutation.apply(source)
            assert mutated != source
            start = line_starts[mutation.line - 1] + mutation.col
            end = line_starts[mutation.end_line - 1] + mutation.end_col
            assert source[start:end] == mutation.before
            assert mutated[:start] == source[:start]
            assert mutated[start + len(mutation.after) :] == source[end:]
            # `mutations` compiled each one (its statement); compiling every module is slow, so a tenth
            if index % 10 == 0:
                compile(mutated, path, "exec", dont_inherit=True)


def test_corpus_mutations_are_deterministic(corpus: dict[str, tuple[str, list[Mutation]]]) -> None:
    for path, (source, found_here) in corpus.items():
        assert mutations(source, path) == found_here


def test_every_operator_appears_over_the_corpus(corpus: dict[str, tuple[str, list[Mutation]]]) -> None:
    counts = Counter(m.operator for _, found_here in corpus.values() for m in found_here)
    print({str(operator): counts[operator] for operator in Operator})  # the report, with -s
    assert set(counts) == set(Operator)


# ------------------------------------------------------------------------------------------- sample


def test_sample_spreads_over_modules_and_operators(corpus: dict[str, tuple[str, list[Mutation]]]) -> None:
    by_module = {path: found_here for path, (_, found_here) in corpus.items()}
    order = sample(by_module, None, seed=7)
    assert sorted(order, key=lambda m: m.key) == sorted(
        (m for ms in by_module.values() for m in ms), key=lambda m: m.key
    )
    first = order[: 2 * len(by_module)]
    assert {m.path for m in first} == set(by_module)
    for path in by_module:
        assert len({m.operator for m in first if m.path == path}) == 2
    assert sample(by_module, 25, seed=7) == order[:25]
    assert sample(by_module, 25, seed=8) != order[:25]
    assert sample(by_module, 0, seed=7) == []


def test_sample_is_the_same_for_the_same_inputs_in_any_mapping_order(
    corpus: dict[str, tuple[str, list[Mutation]]],
) -> None:
    by_module = {path: found_here for path, (_, found_here) in corpus.items()}
    reordered = dict(reversed(list(by_module.items())))
    assert sample(by_module, 100, seed=3) == sample(reordered, 100, seed=3)


def test_sample_refuses_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit must be at least 0"):
        sample({}, -1, seed=0)
