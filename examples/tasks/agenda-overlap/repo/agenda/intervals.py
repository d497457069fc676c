"""Half-open intervals [start, end)."""

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Interval:
    start: int
    end: int

    def __post_init__(self):
        if self.end <= self.start:
            raise ValueError(f"empty or reversed interval [{self.start}, {self.end})")


def overlaps(a, b):
    """True when a and b share at least one minute."""
    return a.start <= b.end and b.start <= a.end
