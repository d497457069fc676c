"""Which intermediate workspaces of an episode the owner asks the verifiers to grade (process rewards).

`off` (the default) grades none. Otherwise the task's untouched workspace is graded (the baseline a first
step's change in pass rate is measured from; the verifier answers it from its cache after the first
episode of a task), and then the workspace after each step that the mode selects: `every` step, `every:K`
(after every K-th step executed), or `changed` (after each step whose snapshot differs from the one before,
which a read-only command like `ls` or a failed edit does not make). Snapshots are content-addressed, so
"changed" is a comparison of ids. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["off", "every", "changed"]


@dataclass(frozen=True, slots=True)
class StepGrading:
    mode: Mode = "off"
    every: int = 1  # with mode "every": after every `every`-th executed step

    @classmethod
    def parse(cls, text: str) -> StepGrading:
        """`off`, `every`, `every:K` (K >= 1) or `changed`; ValueError naming what is accepted."""
        name, _, count = text.partition(":")
        if name == "every":
            if not count:
                return cls("every")
            if count.isdigit() and int(count) >= 1:
                return cls("every", int(count))
        elif name in ("off", "changed") and not count:
            return cls(name)  # type: ignore[arg-type]  # narrowed by the test above
        raise ValueError(f"step grading {text!r}: expected off, every, every:K (K >= 1) or changed")

    def __str__(self) -> str:
        return f"every:{self.every}" if self.mode == "every" and self.every != 1 else self.mode

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def wants(self, executed: int, changed: bool) -> bool:
        """Whether to grade the workspace as it is after `executed` steps (0: the untouched workspace),
        `changed` saying whether the last step changed it."""
        if not self.on:
            return False
        if executed == 0:
            return True
        return executed % self.every == 0 if self.mode == "every" else changed


OFF = StepGrading()
