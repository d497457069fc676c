"""Actions written as Markdown, the way small chat models write anyway.

SmolLM2-135M writes almost no valid JSON tool calls, but it does write code blocks that name their file.
So a reply may also say what to do like this (the first action in the reply wins):

* a fenced code block whose info string or first line names a file -> write_file(path, the block's code):
  ```python calc.py      or      ```python
  <code>                         # calc.py
  ```                            <code>
                                 ```
* a line `run: COMMAND` -> run(COMMAND); a ```bash / ```sh block without a file name -> run(its lines);
* a line `submit` (or `submit()`) -> submit();
* a JSON tool call (see `policy.parse_action`), bare or in a ```json block, as before.

A block the model did not close (it ended its turn inside it) still counts: its code runs to the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from actors.rollout.policy import parse_action
from schemas.actions import Action, RunCommand, Submit, WriteFile

_FENCE = re.compile(r"^[ \t]*```[ \t]*([^\n`]*)\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.MULTILINE | re.DOTALL)
_RUN_LINE = re.compile(r"^[ \t>*-]*`?run:[ \t]*(.+?)`?[ \t]*$", re.MULTILINE | re.IGNORECASE)
_SUBMIT_LINE = re.compile(r"^[ \t>*-]*`?submit(?:\(\))?`?[ \t.!]*$", re.MULTILINE | re.IGNORECASE)
_PATH = re.compile(r"^(?:\./|/workspace/)?([A-Za-z0-9_][A-Za-z0-9_./-]*\.[A-Za-z0-9]+)$")
_NAMING_LINE = re.compile(
    r"^[ \t]*(?:#|//|--|<!--)[ \t]*(?:file(?:name)?[ \t]*[:=][ \t]*)?(\S+?)[ \t]*(?:-->)?[ \t]*$",
    re.IGNORECASE,
)
_SHELLS = frozenset({"bash", "sh", "shell", "console", "terminal", "zsh"})


@dataclass(frozen=True)
class Found:
    """An action read from the reply and where it starts (the earliest one wins)."""

    start: int
    action: Action


class MalformedCall(ValueError):
    """A JSON object with a "tool" key that is not a valid tool call (the message says why)."""


def markdown_action(reply: str) -> Action | None:
    """The first action the reply writes in any accepted form; None when there is none.

    Raises MalformedCall when the first candidate is a JSON tool call that is not valid."""
    found = sorted(_candidates(reply), key=lambda f: f.start)
    return found[0].action if found else None


def _candidates(reply: str) -> Iterator[Found]:
    blocks = list(_FENCE.finditer(reply))
    for block in blocks:
        action = _block_action(block.group(1).strip(), block.group(2))
        if action is not None:
            yield Found(block.start(), action)
    outside = _blank_blocks(reply, blocks)
    for match in _RUN_LINE.finditer(outside):
        yield Found(match.start(), RunCommand(match.group(1).strip()))
    for match in _SUBMIT_LINE.finditer(outside):
        yield Found(match.start(), Submit())
    json_call = _first_json_call(outside)
    if json_call is not None:
        yield json_call


def _block_action(info: str, body: str) -> Action | None:
    words = info.replace(":", " ").split()
    named = next((p for p in map(_path, words) if p), None)
    if named:
        return WriteFile(named, _code(body).encode("utf-8"))
    first, _, rest = body.partition("\n")
    naming = _NAMING_LINE.match(first)
    path = _path(naming.group(1)) if naming else _path(first.strip())
    if path:
        return WriteFile(path, _code(rest).encode("utf-8"))
    language = words[0].lower() if words else ""
    if language == "json" or (not language and body.lstrip().startswith("{")):
        return _json_action(body)
    if language in _SHELLS:
        lines = [line.strip().removeprefix("$ ") for line in body.splitlines()]
        command = " && ".join(line.removeprefix("run:").strip() for line in lines if line)
        return RunCommand(command) if command else None
    run = _RUN_LINE.match(body.strip())
    return RunCommand(run.group(1).strip()) if run else None


def _path(word: str) -> str | None:
    match = _PATH.match(word.strip().strip("`'\""))
    if match is None or ".." in match.group(1).split("/"):
        return None
    return match.group(1)


def _code(body: str) -> str:
    """A block's code as the file's content: one final newline, like a file written by an editor."""
    return body.rstrip("\n") + "\n" if body.strip() else ""


def _json_action(text: str) -> Action | None:
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(call, dict) or "tool" not in call:
        return None
    try:
        return parse_action(call)
    except ValueError as exc:
        raise MalformedCall(str(exc)) from None


def _first_json_call(text: str) -> Found | None:
    for start, candidate in json_objects(text):
        action = _json_action(candidate)
        if action is not None:
            return Found(start, action)
    return None


def _blank_blocks(reply: str, blocks: list[re.Match[str]]) -> str:
    """The reply with code blocks blanked out (same length, so positions still compare)."""
    chars = list(reply)
    for block in blocks:
        for index in range(block.start(), block.end()):
            if chars[index] != "\n":
                chars[index] = " "
    return "".join(chars)


def json_objects(text: str) -> Iterator[tuple[int, str]]:
    """Every outermost balanced {...} span with its start, skipping braces inside JSON strings."""
    start, depth, in_string, escaped = -1, 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"' and depth:
            in_string = True
        elif char == "{":
            start = index if depth == 0 else start
            depth += 1
        elif char == "}" and depth:
            depth -= 1
            if depth == 0:
                yield start, text[start : index + 1]
