import pytest
from agenda.book import Agenda, Conflict
from agenda.intervals import Interval, overlaps


def test_touching_intervals_do_not_overlap():
    assert not overlaps(Interval(0, 10), Interval(10, 20))
    assert not overlaps(Interval(10, 20), Interval(0, 10))


def test_overlapping_intervals():
    assert overlaps(Interval(0, 10), Interval(9, 20))
    assert overlaps(Interval(0, 30), Interval(10, 20))


def test_back_to_back_meetings():
    agenda = Agenda(day_start=540, day_end=1020)
    agenda.book(540, 600)
    agenda.book(600, 660)
    assert len(agenda.meetings) == 2


def test_conflict_still_detected():
    agenda = Agenda()
    agenda.book(540, 600)
    with pytest.raises(Conflict):
        agenda.book(599, 601)


def test_free_slots_skip_empty_gaps():
    agenda = Agenda(day_start=540, day_end=1020)
    agenda.book(540, 600)
    agenda.book(600, 660)
    agenda.book(900, 1020)
    assert agenda.free_slots() == [Interval(660, 900)]


def test_free_slots_of_an_empty_day():
    assert Agenda(day_start=0, day_end=60).free_slots() == [Interval(0, 60)]
