"""Commands on `episode.commands`: asks, not facts. The episode's owner turns them into events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import EpisodeConfig, RecordMeta
from schemas.record import AvroDict


@dataclass(frozen=True, slots=True)
class StartEpisode:
    SCHEMA: ClassVar[str] = "trialog.command.StartEpisode"

    meta: RecordMeta
    run_id: str
    episode_id: str
    task_id: str
    task_version: str
    policy_version: int
    config: EpisodeConfig
    image: str
    group_id: str
    seed: int

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "task_version": self.task_version,
            "policy_version": self.policy_version,
            "config": self.config.to_record(),
            "image": self.image,
            "group_id": self.group_id,
            "seed": self.seed,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> StartEpisode:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["run_id"],
            rec["episode_id"],
            rec["task_id"],
            rec["task_version"],
            rec["policy_version"],
            EpisodeConfig.from_record(rec["config"]),
            rec["image"],
            rec["group_id"],
            rec["seed"],
        )


@dataclass(frozen=True, slots=True)
class AbortEpisode:
    SCHEMA: ClassVar[str] = "trialog.command.AbortEpisode"

    meta: RecordMeta
    run_id: str
    episode_id: str
    reason: str

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "run_id": self.run_id,
            "episode_id": self.episode_id,
            "reason": self.reason,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> AbortEpisode:
        return cls(RecordMeta.from_record(rec["meta"]), rec["run_id"], rec["episode_id"], rec["reason"])
