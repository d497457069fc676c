"""Episode state: what an episode's owner knows after folding its events, and its snapshot record.

The state is a value (a frozen dataclass). `schemas.fold.apply` makes the next one; nothing else does.
A snapshot is this state written as an `EpisodeSnapshot` record: folding the events after the snapshot onto
it gives the same state as folding the whole log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from schemas.common import GENESIS_HASH
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepRecord,
)
from schemas.record import AvroDict, from_optional, optional, untag


class Phase(StrEnum):
    """Where the episode is; it says which request the owner has outstanding or issues next."""

    NEW = "new"  # no event yet
    AWAITING_ACTION = "awaiting_action"  # a PolicyRequest for `step` is due or outstanding
    AWAITING_EXECUTION = "awaiting_execution"  # a SandboxRequest for the pending action
    AWAITING_VERIFICATION = "awaiting_verification"  # the agent submitted; the verifier grades
    REWARDED = "rewarded"  # graded; EpisodeCompleted is due
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in (Phase.COMPLETED, Phase.FAILED)


@dataclass(frozen=True, slots=True)
class EpisodeState:
    SCHEMA: ClassVar[str] = "trialog.episode.EpisodeSnapshot"

    episode_id: str = ""
    phase: Phase = Phase.NEW
    step: int = 0  # current step index == number of executed steps == len(history)
    attempt: int = 0  # attempt of the last applied event
    snapshot_id: str | None = None  # last sandbox snapshot: where a lost sandbox is restored from
    head_hash: str = GENESIS_HASH  # digest of the last applied event; the next event's prev_hash
    events_applied: int = 0
    updated_at_us: int = 0  # occurred_at_us of the last applied event (for timers; never a clock read)
    started: EpisodeStarted | None = None
    history: tuple[StepRecord, ...] = ()
    pending_action: ActionProposed | None = None
    reward: RewardAssigned | None = None
    outcome: EpisodeCompleted | EpisodeFailed | None = None

    @classmethod
    def new(cls, episode_id: str = "") -> EpisodeState:
        """The state before any event; with an id, events of other episodes are refused."""
        return cls(episode_id=episode_id)

    @property
    def is_terminal(self) -> bool:
        return self.phase.is_terminal

    @property
    def steps(self) -> tuple[StepRecord, ...]:
        """Every accepted action in order: the executed steps, then the pending (or submitted) one."""
        if self.pending_action is None:
            return self.history
        return (*self.history, StepRecord(self.pending_action, None))

    def to_record(self) -> AvroDict:
        return {
            "episode_id": self.episode_id,
            "phase": self.phase.value,
            "step": self.step,
            "attempt": self.attempt,
            "snapshot_id": self.snapshot_id,
            "head_hash": self.head_hash,
            "events_applied": self.events_applied,
            "updated_at_us": self.updated_at_us,
            "started": optional(self.started),
            "history": [step.to_record() for step in self.history],
            "pending_action": optional(self.pending_action),
            "reward": optional(self.reward),
            "outcome": optional(self.outcome),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> EpisodeState:
        return cls(
            rec["episode_id"],
            Phase(rec["phase"]),
            rec["step"],
            rec["attempt"],
            rec["snapshot_id"],
            rec["head_hash"],
            rec["events_applied"],
            rec["updated_at_us"],
            from_optional(rec["started"], EpisodeStarted.from_record),
            tuple(StepRecord.from_record(step) for step in rec["history"]),
            from_optional(rec["pending_action"], ActionProposed.from_record),
            from_optional(rec["reward"], RewardAssigned.from_record),
            _outcome_from_union(rec["outcome"]),
        )


def _outcome_from_union(value: Any) -> EpisodeCompleted | EpisodeFailed | None:
    if value is None:
        return None
    name, rec = untag(value)
    if name == EpisodeCompleted.SCHEMA:
        return EpisodeCompleted.from_record(rec)
    if name == EpisodeFailed.SCHEMA:
        return EpisodeFailed.from_record(rec)
    raise ValueError(f"unexpected outcome record {name!r}")
