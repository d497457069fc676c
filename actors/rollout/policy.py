"""The policy plugin interface: a PolicyRequest in, one action with the sample that produced it out.

A plugin sees the whole request (instruction, executed history, sampling parameters with the seed, and the
header: episode, step, attempt, policy version) and returns a `Sample`: the action, the response text it
was parsed from, the response's token ids with their behaviour log-probs (what the learner's importance
ratios need), the finish reason and the prompt's length. The LLM policy plugs in the same way.

Idempotency: the worker answers the same request key (episode, step, attempt) with the same sample when the
plugin is a function of the request. `scripted` and `random` are, by construction (the random choice is
seeded from `sampling.seed` and the step); a sampling LLM is only if it seeds its sampler the same way.
Either way the owner accepts only the first answer for a key, so a second one never reaches the log.

Tool calls are written as one JSON object (the LLM scaffold also reads Markdown forms, see
`markdown_actions`): `{"tool": "run", "command": ...}`,
`{"tool": "write_file", "path": ..., "content": ...}`, `{"tool": "apply_patch", "diff": ...}`,
`{"tool": "submit", "message": ...}`; `render_action` and `parse_action` convert both ways. Scripted
policies' action files use the same objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from schemas.actions import Action, ApplyPatch, RunCommand, Submit, WriteFile
from schemas.requests import PolicyRequest


class PolicyError(Exception):
    """The plugin cannot answer this request (e.g. no script for the task); the request is dead-lettered."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Sample:
    action: Action
    response: str  # the text the action was read from
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # one behaviour log-prob per token id
    prompt_tokens: int
    finish_reason: str = "stop"
    policy_version: int | None = None  # None: the version the request asked for

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.logprobs)} log-probs")


class Policy(Protocol):
    @property
    def name(self) -> str:
        """The plugin's name, for logs."""
        ...

    def sample(self, request: PolicyRequest) -> Sample:
        """The next action of the episode; raises PolicyError when it cannot answer."""
        ...


# ---- tool calls as text -----------------------------------------------------------------------------------


def action_json(action: Action) -> dict[str, str]:
    match action:
        case RunCommand(command=command):
            return {"tool": "run", "command": command}
        case WriteFile(path=path, content=bytes() as content):
            return {"tool": "write_file", "path": path, "content": content.decode("utf-8", "replace")}
        case ApplyPatch(diff=str() as diff):
            return {"tool": "apply_patch", "diff": diff}
        case Submit(message=message):
            return {"tool": "submit", "message": message}
    raise ValueError(f"cannot render {action!r} as a tool call (content held by reference, or no tool call)")


def render_action(action: Action) -> str:
    return json.dumps(action_json(action), ensure_ascii=False, sort_keys=True)


def parse_action(call: Mapping[str, Any]) -> Action:
    """An action from its JSON object; ValueError names what is wrong."""
    if not isinstance(call, Mapping):
        raise ValueError(f"a tool call is a JSON object, not {type(call).__name__}")
    tool = call.get("tool")
    fields = {k: v for k, v in call.items() if k != "tool"}

    def text(key: str, default: str | None = None) -> str:
        value = fields.pop(key, default)
        if not isinstance(value, str):
            raise ValueError(f"{tool}: '{key}' must be a string")
        return value

    action: Action
    if tool == "run":
        action = RunCommand(text("command"))
    elif tool == "write_file":
        action = WriteFile(text("path"), text("content").encode("utf-8"))
    elif tool == "apply_patch":
        action = ApplyPatch(text("diff"))
    elif tool == "submit":
        action = Submit(text("message", ""))
    else:
        raise ValueError(f"unknown tool {tool!r} (run, write_file, apply_patch or submit)")
    if fields:
        raise ValueError(f"{tool}: unknown field(s) {', '.join(sorted(fields))}")
    return action


def byte_tokens(text: str) -> tuple[int, ...]:
    """Token ids of a byte-level vocabulary (0-255): what the non-neural plugins report."""
    return tuple(text.encode("utf-8"))


def prompt_length(request: PolicyRequest) -> int:
    """Byte-level length of the instruction: the non-neural plugins' prompt token count."""
    return len(request.instruction.encode("utf-8"))
