"""Before and after on the same samples: how many changed each way, and whether that could be chance.

A held-out evaluation asks every version for the same (task, seed) episodes, so two versions are compared
pair by pair: a gain is an episode that failed before and passes after, a loss the other way, and the
two-sided exact sign test of the changes says how likely a split at least this uneven would be if the
weights had changed nothing (ties, the episodes that did the same both times, carry no evidence).
Used by `trialog demo` and `trialog bench learning`; pure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Outcomes:
    outcomes: tuple[bool, ...]  # passed or not, per (task, seed), in a fixed order

    @property
    def passed(self) -> int:
        return sum(self.outcomes)

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def __str__(self) -> str:
        return f"{self.rate:.0%} ({self.passed}/{self.total})"


@dataclass(frozen=True)
class Paired:
    gained: int  # failed before, passed after
    lost: int  # passed before, failed after
    p_value: float

    @classmethod
    def of(cls, before: Outcomes, after: Outcomes) -> Paired:
        if before.total != after.total:
            raise ValueError("before and after must evaluate the same samples")
        pairs = list(zip(before.outcomes, after.outcomes, strict=True))
        gained = sum(not b and a for b, a in pairs)
        lost = sum(b and not a for b, a in pairs)
        return cls(gained, lost, sign_test(gained, lost))

    def line(self) -> str:
        return f"{self.gained} gained, {self.lost} lost (two-sided sign test p = {self.p_value:.2g})"


def sign_test(gained: int, lost: int) -> float:
    """The two-sided exact sign test of `gained` changes one way against `lost` the other."""
    changed = gained + lost
    if not changed:
        return 1.0
    tail = sum(math.comb(changed, k) for k in range(min(gained, lost) + 1)) / (1 << changed)
    return min(1.0, 2 * tail)
