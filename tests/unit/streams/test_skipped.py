"""`streams.skipped`: which offsets are read again, and when."""

from __future__ import annotations

from streams.skipped import GRACE_S, StuckCommits, skipped


def test_the_offsets_not_acknowledged_from_the_commit_to_the_end_and_at_most_so_many() -> None:
    assert skipped(13, 19, {14, 15, 16, 17, 18}) == [13]
    assert skipped(13, 19, {15, 17}) == [13, 14, 16, 18]
    assert skipped(13, 19, set(range(13, 19))) == []
    assert skipped(0, 1_000_000, set(), most=3) == [0, 1, 2]  # never the whole range of a long partition


def test_a_commit_is_due_only_once_it_has_stood_for_the_grace_and_then_once_a_grace() -> None:
    stuck = StuckCommits()
    assert not stuck.due("p4", 13, now=100.0)  # first seen
    assert not stuck.due("p4", 13, now=100.0 + GRACE_S - 0.1)
    assert stuck.due("p4", 13, now=100.0 + GRACE_S)
    assert not stuck.due("p4", 13, now=100.0 + GRACE_S + 1)  # read again just now: another grace first
    assert stuck.due("p4", 13, now=100.0 + 2 * GRACE_S)
    assert not stuck.due("p4", 14, now=100.0 + 2 * GRACE_S + 1)  # the commit moved: the clock starts again
    assert not stuck.due("p4", 14, now=100.0 + 3 * GRACE_S)
    assert stuck.due("p4", 14, now=100.0 + 3 * GRACE_S + 1)


def test_partitions_that_moved_away_are_forgotten() -> None:
    stuck = StuckCommits(grace_s=1.0)
    stuck.due("p1", 5, now=0.0)
    stuck.due("p2", 7, now=0.0)
    stuck.keep_only({"p2"})
    assert not stuck.due("p1", 5, now=10.0)  # back: seen anew
    assert stuck.due("p2", 7, now=10.0)
