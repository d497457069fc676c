"""The versions a grade depends on, named in every grade (`RewardAssigned.versions`) and pinned by a run
(`schemas.run_control.RunPinned`): a grade is trusted only as far as the code, image, tests and reward rule
that made it, so each is a content hash carried with the grade, and a change mid-run is a fact in the log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from schemas.record import AvroDict


class Component(StrEnum):
    """A part of the grading chain with a version of its own (and what a quarantine rule matches on)."""

    VERIFIER = "verifier"
    IMAGE = "image"
    TESTS = "tests"
    REWARD_CONFIG = "reward_config"
    TASK = "task"  # the task version (meta.task_version)


@dataclass(frozen=True, slots=True)
class GradeVersions:
    SCHEMA: ClassVar[str] = "trialog.common.GradeVersions"

    verifier: str  # sha256 of the verifier code and its grading settings
    image: str  # the image's content digest, else its reference
    tests: str  # sha256 of the task's hidden tests
    reward_config: str  # sha256 of the reward rule

    def of(self, component: Component) -> str:
        """This grade's version of `component` (not the task: that is the record header's)."""
        if component is Component.TASK:
            raise ValueError("the task version is the record header's, not the grade's")
        value: str = getattr(self, component.value)
        return value

    def to_record(self) -> AvroDict:
        return {
            "verifier": self.verifier,
            "image": self.image,
            "tests": self.tests,
            "reward_config": self.reward_config,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> GradeVersions:
        return cls(rec["verifier"], rec["image"], rec["tests"], rec["reward_config"])
