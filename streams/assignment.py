"""Which partitions this streams worker owns now, as the group's rebalances tell it.

Faust's own view lags behind a rebalance: its assignor keeps the previous generation's partitions until the
next assignment arrives, and (as far as we can read Faust's recovery) one of the previous generation that
finishes while the worker rejoins marks the app as no longer rebalancing (`app.rebalancing`; Faust's
generation check cannot stop it: the new generation's number is known only once its assignment is). In
that window a worker went on with the partitions of the previous generation and appended to those another
worker now owned (the chaos test: two workers recovering the same partitions at once, duplicate steps and
forked chains).

So the worker keeps its own view, from Faust's two signals: a revocation clears it (nothing is owned until
the next assignment), an assignment sets it. Nothing is recovered or handled while it is clear.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Assignment:
    """The partitions of `topic` assigned to this worker in the current generation; None between a
    revocation and the next assignment (and before the first)."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.partitions: frozenset[int] | None = None

    def revoked(self) -> None:
        self.partitions = None

    def assigned(self, tps: Iterable[Any]) -> None:
        """The whole new assignment (Faust's `TP`s of every topic; only `topic`'s count)."""
        self.partitions = frozenset(tp.partition for tp in tps if tp.topic == self.topic)

    @property
    def known(self) -> bool:
        return self.partitions is not None

    def current(self) -> set[int]:
        """The partitions owned now (none while a rebalance is between its revocation and its assignment)."""
        return set(self.partitions or ())
