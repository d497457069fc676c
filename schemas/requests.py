"""Work requests from an episode's owner to the stateless workers (rollout, sandbox and verifier).

A request's header carries the idempotency key (episode_id, step, attempt) and the chain head it was issued
from; the answer echoes all of them, so the owner can tell a fresh answer from a stale or duplicate one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.actions import SandboxAction, sandbox_action_from_union
from schemas.common import EventMeta
from schemas.events import StepRecord
from schemas.record import AvroDict, tagged


@dataclass(frozen=True, slots=True)
class SamplingParams:
    SCHEMA: ClassVar[str] = "trialog.request.SamplingParams"

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = 0

    def to_record(self) -> AvroDict:
        return {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> SamplingParams:
        return cls(rec["temperature"], rec["top_p"], rec["max_tokens"], rec["seed"])


@dataclass(frozen=True, slots=True)
class PolicyRequest:
    SCHEMA: ClassVar[str] = "trialog.request.PolicyRequest"

    meta: EventMeta
    instruction: str
    history: tuple[StepRecord, ...]
    sampling: SamplingParams

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "instruction": self.instruction,
            "history": [step.to_record() for step in self.history],
            "sampling": self.sampling.to_record(),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> PolicyRequest:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["instruction"],
            tuple(StepRecord.from_record(step) for step in rec["history"]),
            SamplingParams.from_record(rec["sampling"]),
        )


@dataclass(frozen=True, slots=True)
class ResourceLimits:
    SCHEMA: ClassVar[str] = "trialog.request.ResourceLimits"

    cpus: float = 1.0
    memory_mb: int = 2048
    pids: int = 256
    disk_mb: int = 1024

    def to_record(self) -> AvroDict:
        return {"cpus": self.cpus, "memory_mb": self.memory_mb, "pids": self.pids, "disk_mb": self.disk_mb}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> ResourceLimits:
        return cls(rec["cpus"], rec["memory_mb"], rec["pids"], rec["disk_mb"])


@dataclass(frozen=True, slots=True)
class SandboxRequest:
    SCHEMA: ClassVar[str] = "trialog.request.SandboxRequest"

    meta: EventMeta  # meta.snapshot_id: restore point (None: fresh workspace from the image)
    image: str
    action: SandboxAction
    timeout_s: float
    output_limit_bytes: int
    limits: ResourceLimits = ResourceLimits()

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "image": self.image,
            "action": tagged(self.action),
            "timeout_s": self.timeout_s,
            "output_limit_bytes": self.output_limit_bytes,
            "limits": self.limits.to_record(),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> SandboxRequest:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["image"],
            sandbox_action_from_union(rec["action"]),
            rec["timeout_s"],
            rec["output_limit_bytes"],
            ResourceLimits.from_record(rec["limits"]),
        )


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    SCHEMA: ClassVar[str] = "trialog.request.VerifyRequest"

    meta: EventMeta  # meta.snapshot_id: the final workspace to grade; meta.step: the submit step
    image: str
    timeout_s: float
    limits: ResourceLimits = ResourceLimits()
    # The efficiency component's inputs (since v2; 0: not known, not measured).
    steps_used: int = 0
    step_budget: int = 0

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "image": self.image,
            "timeout_s": self.timeout_s,
            "limits": self.limits.to_record(),
            "steps_used": self.steps_used,
            "step_budget": self.step_budget,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> VerifyRequest:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["image"],
            rec["timeout_s"],
            ResourceLimits.from_record(rec["limits"]),
            rec["steps_used"],
            rec["step_budget"],
        )
