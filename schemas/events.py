"""The episode events: the facts on `episode.events`, in the order the episode's owner appends them.

EpisodeStarted, then per step ActionProposed and (unless the action is submit) StepExecuted; after submit,
RewardAssigned and EpisodeCompleted. EpisodeFailed may end the episode at any point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.actions import Action, action_from_union
from schemas.blobs import BlobRef
from schemas.common import EpisodeConfig, EventMeta, FailureClass, Output, Verdict
from schemas.fsnames import from_wire_all, to_wire_all
from schemas.record import AvroDict, from_optional, optional, tagged
from schemas.versions import GradeVersions


@dataclass(frozen=True, slots=True)
class EpisodeStarted:
    SCHEMA: ClassVar[str] = "trialog.episode.EpisodeStarted"

    meta: EventMeta
    command_id: str
    config: EpisodeConfig
    image: str
    group_id: str
    seed: int

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "command_id": self.command_id,
            "config": self.config.to_record(),
            "image": self.image,
            "group_id": self.group_id,
            "seed": self.seed,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> EpisodeStarted:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["command_id"],
            EpisodeConfig.from_record(rec["config"]),
            rec["image"],
            rec["group_id"],
            rec["seed"],
        )


@dataclass(frozen=True, slots=True)
class ActionProposed:
    SCHEMA: ClassVar[str] = "trialog.episode.ActionProposed"

    meta: EventMeta
    action: Action
    response: str | BlobRef
    prompt_tokens: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]  # behaviour log-probs, float32 on the wire
    latency_us: int
    finish_reason: str = "stop"

    def to_record(self) -> AvroDict:
        response = self.response
        return {
            "meta": self.meta.to_record(),
            "action": tagged(self.action),
            "response": response if isinstance(response, str) else tagged(response),
            "prompt_tokens": self.prompt_tokens,
            "token_ids": self.token_ids,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
            "latency_us": self.latency_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> ActionProposed:
        response = rec["response"]
        return cls(
            EventMeta.from_record(rec["meta"]),
            action_from_union(rec["action"]),
            response if isinstance(response, str) else BlobRef.from_record(response),
            rec["prompt_tokens"],
            tuple(rec["token_ids"]),
            tuple(rec["logprobs"]),
            rec["latency_us"],
            rec["finish_reason"],
        )


@dataclass(frozen=True, slots=True)
class StepExecuted:
    SCHEMA: ClassVar[str] = "trialog.episode.StepExecuted"

    meta: EventMeta  # meta.snapshot_id: the snapshot taken after this step
    exit_code: int
    stdout: Output
    stderr: Output
    timed_out: bool
    duration_us: int
    oom_killed: bool = False

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "exit_code": self.exit_code,
            "stdout": self.stdout.to_record(),
            "stderr": self.stderr.to_record(),
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
            "duration_us": self.duration_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> StepExecuted:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["exit_code"],
            Output.from_record(rec["stdout"]),
            Output.from_record(rec["stderr"]),
            rec["timed_out"],
            rec["duration_us"],
            rec["oom_killed"],
        )


@dataclass(frozen=True, slots=True)
class RewardAssigned:
    SCHEMA: ClassVar[str] = "trialog.episode.RewardAssigned"

    meta: EventMeta
    reward: float
    verdict: Verdict
    passed: int
    total: int
    failed_tests: tuple[str, ...]
    tampered_paths: tuple[str, ...]
    verifier: str
    report: BlobRef | None = None
    # Evidence lines of tampering seen while the tests ran (since v2; any one grades tampered, -1.0).
    tamper_signals: tuple[str, ...] = ()
    # The versions that produced the grade (since v3; None: an older verifier named none).
    versions: GradeVersions | None = None
    duration_us: int = 0  # grading time (since v3; 0: answered from the verifier's cache, or older)
    # The outcome rule's share of `reward` (since v4); None when built: the reward is the outcome alone.
    outcome_reward: float | None = None
    # Each measured component (name, value before its weight), by name (since v4; older: none).
    components: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.outcome_reward is None:  # a grade with no component: its reward is its outcome
            object.__setattr__(self, "outcome_reward", self.reward)
        object.__setattr__(self, "components", tuple(sorted(self.components)))

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "reward": self.reward,
            "verdict": self.verdict.value,
            "passed": self.passed,
            "total": self.total,
            "failed_tests": self.failed_tests,
            # Names as `os.fsdecode` gives them; not every one is UTF-8 (see `schemas.fsnames`).
            "tampered_paths": to_wire_all(self.tampered_paths),
            # Evidence may quote a file name or a value of the graded code: carried losslessly the same way.
            "tamper_signals": to_wire_all(self.tamper_signals),
            "verifier": self.verifier,
            "report": optional(self.report),
            "versions": optional(self.versions),
            "duration_us": self.duration_us,
            "outcome_reward": self.outcome_reward,
            "components": dict(self.components),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RewardAssigned:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["reward"],
            Verdict(rec["verdict"]),
            rec["passed"],
            rec["total"],
            tuple(rec["failed_tests"]),
            from_wire_all(rec["tampered_paths"]),
            rec["verifier"],
            from_optional(rec["report"], BlobRef.from_record),
            from_wire_all(rec["tamper_signals"]),
            from_optional(rec["versions"], GradeVersions.from_record),
            rec["duration_us"],
            rec["outcome_reward"],
            tuple(rec["components"].items()),
        )


@dataclass(frozen=True, slots=True)
class EpisodeCompleted:
    SCHEMA: ClassVar[str] = "trialog.episode.EpisodeCompleted"

    meta: EventMeta
    reward: float
    verdict: Verdict
    steps: int
    duration_us: int

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "reward": self.reward,
            "verdict": self.verdict.value,
            "steps": self.steps,
            "duration_us": self.duration_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> EpisodeCompleted:
        return cls(
            EventMeta.from_record(rec["meta"]),
            rec["reward"],
            Verdict(rec["verdict"]),
            rec["steps"],
            rec["duration_us"],
        )


@dataclass(frozen=True, slots=True)
class EpisodeFailed:
    SCHEMA: ClassVar[str] = "trialog.episode.EpisodeFailed"

    meta: EventMeta
    failure: FailureClass
    reason: str
    retryable: bool = False

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "failure": self.failure.value,
            "reason": self.reason,
            "retryable": self.retryable,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> EpisodeFailed:
        return cls(
            EventMeta.from_record(rec["meta"]), FailureClass(rec["failure"]), rec["reason"], rec["retryable"]
        )


EpisodeEvent = (
    EpisodeStarted | ActionProposed | StepExecuted | RewardAssigned | EpisodeCompleted | EpisodeFailed
)
EPISODE_EVENT_TYPES: tuple[type[EpisodeEvent], ...] = (
    EpisodeStarted,
    ActionProposed,
    StepExecuted,
    RewardAssigned,
    EpisodeCompleted,
    EpisodeFailed,
)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One step: the accepted action and, once executed, its result (none for submit)."""

    SCHEMA: ClassVar[str] = "trialog.episode.StepRecord"

    action: ActionProposed
    result: StepExecuted | None = None

    def to_record(self) -> AvroDict:
        return {"action": self.action.to_record(), "result": optional(self.result)}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> StepRecord:
        return cls(
            ActionProposed.from_record(rec["action"]), from_optional(rec["result"], StepExecuted.from_record)
        )
