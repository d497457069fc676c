from __future__ import annotations

import re

import pytest

from actors.tasks.synth.instruction import (
    MAX_CHARS,
    FailingTest,
    error_excerpt,
    leaks,
    significant,
    write_instruction,
)

# Failure texts as pytest 9 reports them (`str(report.longrepr)`) for two bugs in a toolz-like project:
# `take` with its `islice` arguments swapped, `frequencies` with its counting statement dropped.
TAKE_FORBIDDEN = ("seq, n", "n, seq")
FREQUENCIES_FORBIDDEN = ("        counts[item] = counts.get(item, 0) + 1\n", "")

TAKE_LONG = '''\
def test_take():
        """take returns the first n items, in order."""
>       assert take(2, [1, 2, 3]) == [1, 2]
               ^^^^^^^^^^^^^^^^^^

tests/test_itertoolz.py:7:\x20
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _\x20

n = 2, seq = [1, 2, 3]

    def take(n, seq):
        """The first n elements of seq."""
>       return list(itertools.islice(n, seq))
                    ^^^^^^^^^^^^^^^^^^^^^^^^
E       ValueError: Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize.

toolz/itertoolz.py:6: ValueError'''

TAKE_SHORT = """\
tests/test_itertoolz.py:7: in test_take
    assert take(2, [1, 2, 3]) == [1, 2]
           ^^^^^^^^^^^^^^^^^^
toolz/itertoolz.py:6: in take
    return list(itertools.islice(n, seq))
                ^^^^^^^^^^^^^^^^^^^^^^^^
E   ValueError: Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize."""

TAKE_NATIVE = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/_pytest/python.py", line 187, in pytest_pyfunc_call
    result = testfunction(**testargs)
             ^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/toolz/tests/test_itertoolz.py", line 7, in test_take
    assert take(2, [1, 2, 3]) == [1, 2]
           ^^^^^^^^^^^^^^^^^^
  File "/work/toolz/toolz/itertoolz.py", line 6, in take
    return list(itertools.islice(n, seq))
                ^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize.
  (while taking 2)"""

FREQUENCIES_LONG = """\
self = <test_itertoolz.TestFrequencies object at 0x7f5238f26590>
seq = ['a', 'b', 'a']

    @pytest.mark.parametrize("seq", [["a", "b", "a"]])
    def test_counts(self, seq):
>       assert frequencies(seq) == {"a": 2, "b": 1}
E       AssertionError: assert {} == {'a': 2, 'b': 1}
E        \x20
E         Right contains 2 more items:
E         {'a': 2, 'b': 1}
E         Use -v to get more diff

tests/test_itertoolz.py:13: AssertionError"""

TAKE_ERROR = "ValueError: Stop argument for islice() must be None or an integer: 0 <= x <= sys.maxsize."


@pytest.mark.parametrize("error", [TAKE_LONG, TAKE_SHORT], ids=["long", "short"])
def test_excerpt_keeps_the_exception_and_drops_code_and_locations(error: str) -> None:
    assert error_excerpt(error, TAKE_FORBIDDEN) == TAKE_ERROR


def test_excerpt_of_a_native_traceback_is_what_follows_the_last_frame() -> None:
    assert error_excerpt(TAKE_NATIVE, TAKE_FORBIDDEN) == f"{TAKE_ERROR}\n  (while taking 2)"


def test_excerpt_of_an_assertion_keeps_its_explanation() -> None:
    assert error_excerpt(FREQUENCIES_LONG, FREQUENCIES_FORBIDDEN) == (
        "AssertionError: assert {} == {'a': 2, 'b': 1}\n  Right contains 2 more items:\n  {'a': 2, 'b': 1}"
    )


def test_excerpt_drops_message_lines_with_a_forbidden_snippet_or_a_location() -> None:
    error = (
        "E       AssertionError: total was wrong\n"
        "E       while counts[item] = counts.get(item,   0) + 1 ran\n"
        'E       File "toolz/itertoolz.py", line 6\n'
        "E       see toolz/itertoolz.py:6 for details\n"
        "E       a mutation test\n"
    )
    assert error_excerpt(error, FREQUENCIES_FORBIDDEN) == "AssertionError: total was wrong"


def test_excerpt_without_message_lines_uses_the_last_plain_lines() -> None:
    error = (
        "def test_x():\n"
        ">       helper()\n\n"
        "tests/test_x.py:3: \n"
        "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _\n"
        "x = 1\n\n"
        "    def helper():\n"
        ">       raise Boom(x - 1)\n"
        "Boom: 0\n\n"
        "pkg/helpers.py:9: Boom"
    )
    assert error_excerpt(error, ["x - 1"]) == "Boom: 0\nBoom"


def test_excerpt_is_trimmed_visibly() -> None:
    error = "\n".join(f"E   line {index} " + "x" * 50 for index in range(20))
    by_lines = error_excerpt(error, [], max_lines=3, max_chars=10_000)
    assert by_lines.splitlines() == ["line 0 " + "x" * 50, "line 1 " + "x" * 50, "..."]
    by_chars = error_excerpt(error, [], max_lines=20, max_chars=100)
    assert len(by_chars) <= 100 and by_chars.endswith("...")
    with pytest.raises(ValueError, match="max_lines"):
        error_excerpt(error, [], max_lines=0)


def test_trivial_snippets_are_not_checked() -> None:
    assert significant(
        ["<=", " n - 1 ", "None", "is not", "1000", "", "x[1:]", "seq, n", "total\n  += item"]
    ) == [
        "x[1:]",
        "seq, n",
        "total",
        "+= item",
    ]
    assert leaks("assert a <= b is not None", ["<=", "is not", "None"]) == []
    assert leaks("call it as islice(seq,   n)", TAKE_FORBIDDEN) == ["seq, n"]


def failing() -> list[FailingTest]:
    return [
        FailingTest(
            "tests/test_itertoolz.py::test_take", "take returns the first n items, in order.", TAKE_LONG
        ),
        FailingTest("tests/test_itertoolz.py::TestFrequencies::test_counts[seq0]", None, FREQUENCIES_LONG),
    ]


def test_instruction_names_the_tests_their_intent_and_messages() -> None:
    text = write_instruction("toolz", failing(), forbidden=[*TAKE_FORBIDDEN, *FREQUENCIES_FORBIDDEN])
    assert "toolz" in text
    assert "`test_take` (tests/test_itertoolz.py)" in text
    assert "`TestFrequencies::test_counts[seq0]` (tests/test_itertoolz.py)" in text
    assert "take returns the first n items, in order." in text
    assert TAKE_ERROR in text
    assert "AssertionError: assert {} == {'a': 2, 'b': 1}" in text
    assert "do not" in text and len(text) <= MAX_CHARS


def test_instruction_gives_nothing_away() -> None:
    forbidden = [*TAKE_FORBIDDEN, *FREQUENCIES_FORBIDDEN]
    for tests in (failing(), failing()[:1], failing()[1:]):
        text = write_instruction("toolz", tests, forbidden=forbidden)
        assert leaks(text, forbidden) == []
        assert not re.search(r"mutat|mutant", text, re.IGNORECASE)
        assert "itertoolz.py:6" not in text and "line 6" not in text
        assert "islice(n" not in text and "def take" not in text


def test_instruction_is_deterministic_and_phrased_by_the_tests() -> None:
    assert write_instruction("toolz", failing()) == write_instruction("toolz", list(reversed(failing())))
    texts = {
        write_instruction("toolz", [FailingTest(f"tests/test_a.py::test_{index}", None, TAKE_SHORT)])
        for index in range(40)
    }
    intros = {text.splitlines()[0].replace(f"test_{index}", "") for index, text in enumerate(texts)}
    assert len(intros) > 1


def test_instruction_lists_at_most_max_tests_and_counts_the_rest() -> None:
    many = [FailingTest(f"tests/test_a.py::test_{index:02}", None, TAKE_SHORT) for index in range(8)]
    text = write_instruction("toolz", many, max_tests=3)
    assert [f"test_{index:02}" in text for index in range(8)] == [True] * 3 + [False] * 5
    assert "and 5 more tests" in text
    assert text.count(TAKE_ERROR) == 1  # the same failure is shown once, for the three tests
    assert "8 tests" in text


def test_instruction_stays_short_with_long_failures() -> None:
    long_error = "\n".join(f"E   {'word ' * 30}{index}" for index in range(40))
    tests = [
        FailingTest(f"tests/test_a.py::test_{index}", "Checks " + "a lot " * 60, long_error)
        for index in range(5)
    ]
    assert len(write_instruction("toolz", tests)) <= MAX_CHARS


def test_instruction_needs_tests() -> None:
    with pytest.raises(ValueError, match="at least one failing test"):
        write_instruction("toolz", [])
    with pytest.raises(ValueError, match="max_tests"):
        write_instruction("toolz", failing(), max_tests=0)
