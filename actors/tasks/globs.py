"""Protected-path globs: checking them when a task is loaded, and matching relative paths against them.

A glob is a `/`-separated pattern relative to repo/: `*` and `?` match within one path segment, `[...]` is a
character class, and a segment of exactly `**` matches any number of segments. A glob protects what it
matches *and everything below it*, so `tests` and `tests/**` both protect the whole tests folder. Wildcards
match dotfiles too: a protected `*.cfg` must not let `.hidden.cfg` through. Within a segment the syntax
is fnmatch's (`[!...]` negates a class, a `]` right after `[` is literal).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_SEGMENT = "[^/]+"


def glob_problem(pattern: str) -> str | None:
    """Why `pattern` is not a usable glob, or None when it is."""
    if not pattern or pattern != pattern.strip():
        return "is empty or has leading/trailing whitespace"
    if pattern.startswith("/"):
        return "is absolute; globs are relative to repo/"
    if "\\" in pattern:
        return "contains a backslash; use '/' to separate folders"
    if pattern.endswith("/"):
        return "ends with '/'; drop it (a glob that names a folder covers everything under it)"
    for segment in pattern.split("/"):
        if segment in ("", ".", ".."):
            return f"has an empty, '.' or '..' segment ({segment!r})"
        if "**" in segment and segment != "**":
            return f"uses '**' inside the segment {segment!r}; '**' must be a whole segment"
        problem = _class_problem(segment)
        if problem:
            return problem
    try:
        re.compile(translate(pattern))
    except re.error as exc:  # e.g. a reversed range such as [z-a]
        return f"is not a valid pattern ({exc})"
    return None


def _class_problem(segment: str) -> str | None:
    index = 0
    while index < len(segment):
        if segment[index] == "[":
            close = _class_end(segment, index)
            if close < 0:
                return f"has an unclosed '[' in {segment!r}"
            index = close
        index += 1
    return None


def _class_body_start(segment: str, open_index: int) -> int:
    negated = segment[open_index + 1 : open_index + 2] == "!"
    return open_index + 2 if negated else open_index + 1


def _class_end(segment: str, open_index: int) -> int:
    # As in fnmatch, the first character of a class is literal, so `[]]` is a class holding ']'.
    return segment.find("]", _class_body_start(segment, open_index) + 1)


def _translate_segment(segment: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(segment):
        char = segment[index]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            body_start, close = _class_body_start(segment, index), _class_end(segment, index)
            negate = body_start == index + 2
            body = "".join("-" if c == "-" else re.escape(c) for c in segment[body_start:close])
            # (?!/): a class never matches the separator, not even through a range such as [.-0].
            out.append(f"(?!/)[{'^' if negate else ''}{body}]")
            index = close
        else:
            out.append(re.escape(char))
        index += 1
    return "".join(out)


def translate(pattern: str) -> str:
    """The regular expression (for `re.fullmatch`) equivalent to a valid glob."""
    segments = pattern.split("/")
    out: list[str] = []
    for index, segment in enumerate(segments):
        first, last = index == 0, index == len(segments) - 1
        if segment == "**":
            if first and last:
                out.append(f"{_SEGMENT}(?:/{_SEGMENT})*")
            elif last:
                out.append(f"(?:/{_SEGMENT})*")
            elif first:
                out.append(f"(?:{_SEGMENT}/)*")
            else:
                out.append(f"/(?:{_SEGMENT}/)*")
            continue
        after_globstar = index > 0 and segments[index - 1] == "**"
        if not first and not after_globstar:
            out.append("/")
        out.append(_translate_segment(segment))
    return "".join(out)


@dataclass(frozen=True)
class GlobSet:
    """A compiled set of protected globs."""

    patterns: tuple[str, ...]
    _regex: re.Pattern[str] | None

    @classmethod
    def compile(cls, patterns: Sequence[str]) -> GlobSet:
        for pattern in patterns:
            problem = glob_problem(pattern)
            if problem:
                raise ValueError(f"glob {pattern!r} {problem}")
        joined = "|".join(f"(?:{translate(p)})" for p in patterns)
        return cls(tuple(patterns), re.compile(joined) if patterns else None)

    def covers(self, path: str) -> bool:
        """True when `path` (relative, `/`-separated) or one of its parent folders matches a glob."""
        if self._regex is None:
            return False
        return any(self._regex.fullmatch(prefix) for prefix in _self_and_parents(path))

    def select(self, paths: Iterable[str]) -> list[str]:
        return sorted(p for p in paths if self.covers(p))


def _self_and_parents(path: str) -> Iterable[str]:
    parts = path.split("/")
    for end in range(len(parts), 0, -1):
        yield "/".join(parts[:end])
