"""The tool calls a policy can make: run(command), write_file(path, content), apply_patch(diff), submit()."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.blobs import BlobRef
from schemas.record import AvroDict, tagged, untag


@dataclass(frozen=True, slots=True)
class RunCommand:
    SCHEMA: ClassVar[str] = "trialog.action.RunCommand"

    command: str

    def to_record(self) -> AvroDict:
        return {"command": self.command}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RunCommand:
        return cls(rec["command"])


@dataclass(frozen=True, slots=True)
class WriteFile:
    SCHEMA: ClassVar[str] = "trialog.action.WriteFile"

    path: str
    content: bytes | BlobRef  # inline under the cap, else by content hash (see blobs.inline_or_ref)

    def to_record(self) -> AvroDict:
        content = self.content
        return {"path": self.path, "content": content if isinstance(content, bytes) else tagged(content)}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> WriteFile:
        content = rec["content"]
        return cls(rec["path"], content if isinstance(content, bytes) else BlobRef.from_record(content))


@dataclass(frozen=True, slots=True)
class ApplyPatch:
    SCHEMA: ClassVar[str] = "trialog.action.ApplyPatch"

    diff: str | BlobRef

    def to_record(self) -> AvroDict:
        diff = self.diff
        return {"diff": diff if isinstance(diff, str) else tagged(diff)}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> ApplyPatch:
        diff = rec["diff"]
        return cls(diff if isinstance(diff, str) else BlobRef.from_record(diff))


@dataclass(frozen=True, slots=True)
class Submit:
    SCHEMA: ClassVar[str] = "trialog.action.Submit"

    message: str = ""

    def to_record(self) -> AvroDict:
        return {"message": self.message}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Submit:
        return cls(rec["message"])


INVALID_REPLY_CHARS = 1000  # the raw reply kept in an InvalidReply; the whole reply is in the response


@dataclass(frozen=True, slots=True)
class InvalidReply:
    """A reply that is no valid tool call: recorded as a step (its observation is `error`), never executed."""

    SCHEMA: ClassVar[str] = "trialog.action.InvalidReply"

    error: str  # worded for the model
    reply: str  # the start of the raw reply
    reply_truncated: bool = False

    @classmethod
    def of(cls, error: str, reply: str, limit: int = INVALID_REPLY_CHARS) -> InvalidReply:
        """The error with the reply bounded to `limit` characters."""
        return cls(error, reply[:limit], len(reply) > limit)

    def to_record(self) -> AvroDict:
        return {"error": self.error, "reply": self.reply, "reply_truncated": self.reply_truncated}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> InvalidReply:
        return cls(rec["error"], rec["reply"], rec["reply_truncated"])


SandboxAction = RunCommand | WriteFile | ApplyPatch
"""What a sandbox executes."""

Action = RunCommand | WriteFile | ApplyPatch | Submit | InvalidReply
"""What a policy proposes (an InvalidReply: what it replied when that was no tool call)."""

_ACTION_TYPES: dict[str, type[Action]] = {
    t.SCHEMA: t for t in (RunCommand, WriteFile, ApplyPatch, Submit, InvalidReply)
}


def action_from_union(value: Any) -> Action:
    name, rec = untag(value)
    if name is None:
        raise ValueError("an action union must be read with its record name")
    return _ACTION_TYPES[name].from_record(rec)


def sandbox_action_from_union(value: Any) -> SandboxAction:
    action = action_from_union(value)
    if isinstance(action, Submit | InvalidReply):
        raise ValueError(f"{type(action).__name__} is not executed by a sandbox")
    return action
