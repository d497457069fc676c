"""The agent scaffold: an episode's history as chat messages for the model, and its reply as one action.

Rendering: a short system message that teaches the reply forms with one worked example, the task's
instruction, then per executed step the model's own reply (assistant) and what it caused (user: exit code,
bounded stdout/stderr, flags). The model's exact earlier replies are replayed, not re-rendered, so the
tokens it is conditioned on are the tokens it produced.

Parsing (`markdown_actions`): the first action the reply writes, as a code block naming its file, a line
`run: COMMAND`, a line `submit`, or a JSON tool call. A reply with none, or a malformed tool call, gives a
`ReplyError` whose `message` is written for the model (what was wrong and the expected form); the policy
proposes it as an `InvalidReply`, which the pipeline records as a step whose observation is that message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from actors.rollout.markdown_actions import (
    MalformedCall,
    json_objects,
    markdown_action,
    only_python_file,
)
from schemas.actions import Action, InvalidReply
from schemas.common import Output
from schemas.events import StepExecuted, StepRecord
from schemas.requests import PolicyRequest

SYSTEM_PROMPT = """\
You are a software engineer. You fix a Python repository in /workspace, one action per reply.
Actions:
- write a whole file: a code block whose first line names the file
- run a shell command: a line run: COMMAND
- finish (hidden tests then grade your work): a line submit
Example. Task: make add() in calc.py return the sum. Your reply:
```python
# calc.py
def add(a, b):
    return a + b
```"""

FORMAT_HINT = (
    "Reply with one action: a code block whose first line names the file (# calc.py), "
    "or a line run: COMMAND, or a line submit."
)
OBSERVATION_CHARS = 2000  # per stream: a small model's context is short


@dataclass(frozen=True)
class ReplyError:
    """Why a reply is not a tool call, worded for the model."""

    message: str


def messages(request: PolicyRequest) -> list[dict[str, str]]:
    """The chat for the next turn: system, the task, then each executed step's reply and observation."""
    steps = step_messages(request.history)
    return head_messages(request.instruction) + [message for step in steps for message in step]


def head_messages(instruction: str) -> list[dict[str, str]]:
    """The part of the chat every turn starts with: the system prompt and the task."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Task:\n{instruction.strip()}"},
    ]


def step_messages(history: Sequence[StepRecord]) -> list[list[dict[str, str]]]:
    """Per executed step, oldest first: the model's reply and the observation it caused."""
    steps = []
    for step in history:
        turn = [{"role": "assistant", "content": _reply_text(step.action.response)}]
        if step.result is not None:
            turn.append({"role": "user", "content": observation(step.result)})
        steps.append(turn)
    return steps


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


def parse_reply(reply: str, instruction: str = "") -> Action | ReplyError:
    """The action in a model's reply (Markdown or a JSON tool call), or what is wrong with it. A Python
    block that names no file writes the one Python file the task's `instruction` names, if it names one."""
    try:
        action = markdown_action(reply, only_python_file(instruction))
    except MalformedCall as exc:
        return ReplyError(f"Your tool call is not valid: {exc}. {FORMAT_HINT}")
    if action is not None:
        return action
    return ReplyError(f"{_why_not(reply)} {FORMAT_HINT}")


def _why_not(reply: str) -> str:
    for _, candidate in json_objects(reply):
        if '"tool"' in candidate:
            try:
                json.loads(candidate)
            except json.JSONDecodeError as exc:
                return f"Your reply has a JSON tool call that is not valid JSON ({exc.msg})."
    if "```" in reply:
        return "Your code block does not name its file: put the file name on its first line."
    return "Your reply has no action."


def invalid_reply(reply: str, error: ReplyError) -> InvalidReply:
    """What the policy proposes when its reply is no action: a step whose observation is the error."""
    return InvalidReply.of(error.message, reply)
