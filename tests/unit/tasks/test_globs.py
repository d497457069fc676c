from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.tasks.globs import GlobSet, glob_problem


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("", "empty"),
        (" tests", "whitespace"),
        ("/etc/passwd", "absolute"),
        ("tests\\x.py", "backslash"),
        ("tests/", "ends with '/'"),
        ("a//b", "empty"),
        ("../outside", "'..'"),
        ("./tests", "'.'"),
        ("a**/b", "'**' must be a whole segment"),
        ("test_[ab.py", "unclosed '['"),
        ("[z-a].py", "not a valid pattern"),
    ],
)
def test_bad_globs_say_why(pattern: str, problem: str) -> None:
    found = glob_problem(pattern)
    assert found is not None and problem in found
    with pytest.raises(ValueError, match="glob"):
        GlobSet.compile([pattern])


@pytest.mark.parametrize(
    "pattern", ["tests", "tests/**", "**/conftest.py", "*.cfg", "src/[!_]*.py", "[]]x", "**"]
)
def test_good_globs(pattern: str) -> None:
    assert glob_problem(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "path", "covered"),
    [
        ("tests", "tests", True),
        ("tests", "tests/unit/test_a.py", True),  # a folder glob covers everything below it
        ("tests", "tests_extra/a.py", False),
        ("tests/**", "tests/a/b/c.py", True),
        ("tests/**", "tests", True),
        ("*.cfg", "setup.cfg", True),
        ("*.cfg", ".hidden.cfg", True),  # wildcards match dotfiles
        ("*.cfg", "sub/setup.cfg", False),  # '*' stays within one segment
        ("**/*.cfg", "sub/deep/setup.cfg", True),
        ("**/*.cfg", "setup.cfg", True),
        ("a/**/z", "a/z", True),
        ("a/**/z", "a/b/c/z", True),
        ("a/**/z", "a/b/c/y", False),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("a[!b]c", "a/c", False),  # classes never match the separator
        ("a[.-0]c", "a/c", False),
        ("a[!b]c", "axc", True),
        ("**", "anything/at/all", True),
    ],
)
def test_matching(pattern: str, path: str, covered: bool) -> None:
    assert GlobSet.compile([pattern]).covers(path) is covered


def test_empty_set_covers_nothing() -> None:
    assert not GlobSet.compile([]).covers("anything")
    assert GlobSet.compile(["b", "a/*"]).select(["c", "b/x", "a/y", "a"]) == ["a/y", "b/x"]


_NAMES = st.text(alphabet="ab.-!]x", min_size=1, max_size=6)
_PATTERNS = st.text(alphabet="ab.-!]x*?[", min_size=1, max_size=8).filter(lambda p: glob_problem(p) is None)


@given(pattern=_PATTERNS, name=_NAMES)
def test_single_segment_globs_agree_with_fnmatch(pattern: str, name: str) -> None:
    assert GlobSet.compile([pattern]).covers(name) == fnmatch.fnmatchcase(name, pattern)
