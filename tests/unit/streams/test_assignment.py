"""The streams worker's own view of its partitions (`streams.assignment`): cleared by a revocation, set by
the next assignment, never the previous generation's in between."""

from __future__ import annotations

from dataclasses import dataclass

from streams.assignment import Assignment


@dataclass(frozen=True)
class TP:
    topic: str
    partition: int


def test_nothing_is_owned_before_the_first_assignment_and_between_a_revocation_and_the_next() -> None:
    assignment = Assignment("run.episode.commands")
    assert not assignment.known and assignment.current() == set()
    assignment.assigned(
        {TP("run.episode.commands", 4), TP("run.episode.commands", 7), TP("run.changelog", 4)}
    )
    assert assignment.known and assignment.current() == {4, 7}
    assignment.revoked()
    assert not assignment.known and assignment.current() == set()  # not {4, 7}: those may have moved
    assignment.assigned(set())  # a generation that gives this worker nothing
    assert assignment.known and assignment.current() == set()
