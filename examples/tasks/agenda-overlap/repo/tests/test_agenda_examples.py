import pytest
from agenda.book import Agenda, Conflict


def test_overlapping_meetings_conflict():
    agenda = Agenda()
    agenda.book(540, 600)
    with pytest.raises(Conflict):
        agenda.book(570, 630)
