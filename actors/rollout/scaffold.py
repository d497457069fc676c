"""The agent scaffold: an episode's history as chat messages for the model, and its reply as one tool call.

Rendering: a system message that names the four tools and the one reply format, the task's instruction,
then per executed step the model's own reply (assistant) and what it caused (user: exit code, bounded
stdout/stderr, flags). The model's exact earlier replies are replayed, not re-rendered, so the tokens it is
conditioned on are the tokens it produced.

Parsing is tolerant about where the call is and strict about what it is: the first JSON object with a
"tool" key anywhere in the reply (bare, or in a ```json fence), checked by `parse_action`. A reply with no
such object, or a malformed one, gives a `ReplyError` whose `message` is written for the model (what was
wrong and the expected form); the pipeline turns it into an observation and counts the step.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from actors.rollout.policy import parse_action
from schemas.actions import Action, ApplyPatch, RunCommand, Submit, WriteFile
from schemas.common import Output
from schemas.events import StepExecuted
from schemas.requests import PolicyRequest

SYSTEM_PROMPT = """\
You are a software engineer working in a Linux sandbox on a Python repository in /workspace.
Each turn, reply with exactly one tool call, a JSON object on its own line:
{"tool": "run", "command": "python3 -m pytest -q"}
{"tool": "write_file", "path": "calc.py", "content": "def add(a, b):\\n    return a + b\\n"}
{"tool": "apply_patch", "diff": "<a unified diff, paths relative to /workspace>"}
{"tool": "submit"}
Run commands to look around and test, change files, and submit when the task is done. Hidden tests grade
the result; do not change the visible tests."""

FORMAT_HINT = 'Reply with exactly one JSON tool call, for example {"tool": "run", "command": "ls"}.'
OBSERVATION_CHARS = 2000  # per stream: a small model's context is short


@dataclass(frozen=True)
class ReplyError:
    """Why a reply is not a tool call, worded for the model."""

    message: str


def messages(request: PolicyRequest) -> list[dict[str, str]]:
    """The chat for the next turn: system, the task, then each executed step's reply and observation."""
    chat = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Task:\n{request.instruction.strip()}"},
    ]
    for step in request.history:
        chat.append({"role": "assistant", "content": _reply_text(step.action.response)})
        if step.result is not None:
            chat.append({"role": "user", "content": observation(step.result)})
    return chat


def _reply_text(response: object) -> str:
    # Large responses travel by reference; the scaffold only shows what is inline.
    return response if isinstance(response, str) else "(a long reply, not shown)"


def observation(result: StepExecuted) -> str:
    lines = [f"exit code {result.exit_code}"]
    if result.timed_out:
        lines.append("the command ran past its time limit and was killed")
    if result.oom_killed:
        lines.append("the command ran out of memory and was killed")
    lines += _stream("stdout", result.stdout) + _stream("stderr", result.stderr)
    return "\n".join(lines)


def _stream(name: str, output: Output) -> list[str]:
    if not output.text:
        return []
    text = output.text[-OBSERVATION_CHARS:]
    cut = output.truncated or len(output.text) > OBSERVATION_CHARS
    return [f"{name}{' (end only)' if cut else ''}:", text.rstrip("\n")]


def parse_reply(reply: str) -> Action | ReplyError:
    """The tool call in a model's reply, or what is wrong with it."""
    problems: list[str] = []
    for candidate in _json_objects(reply):
        try:
            call = json.loads(candidate)
        except json.JSONDecodeError as exc:
            problems.append(f"not valid JSON ({exc.msg})")
            continue
        if not isinstance(call, dict) or "tool" not in call:
            continue
        try:
            return parse_action(call)
        except ValueError as exc:
            return ReplyError(f"Your tool call is not valid: {exc}. {FORMAT_HINT}")
    if problems:
        return ReplyError(f"Your reply has a JSON object that is {problems[0]}. {FORMAT_HINT}")
    return ReplyError(f"Your reply has no tool call. {FORMAT_HINT}")


def _json_objects(text: str) -> Iterator[str]:
    """Every balanced {...} span, outermost first, skipping braces inside JSON strings."""
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
                yield text[start : index + 1]


def describe(action: Action) -> str:
    """A one-line summary of an action, for progress lines and reports."""
    match action:
        case RunCommand(command=command):
            return f"run: {command[:60]}"
        case WriteFile(path=path):
            return f"write_file: {path}"
        case ApplyPatch():
            return "apply_patch"
        case Submit():
            return "submit"
    return type(action).__name__
