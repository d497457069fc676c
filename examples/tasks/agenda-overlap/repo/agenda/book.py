"""Booking meetings."""

from agenda.intervals import Interval, overlaps


class Conflict(Exception):
    pass


class Agenda:
    def __init__(self, day_start=0, day_end=24 * 60):
        self.day = Interval(day_start, day_end)
        self.meetings = []

    def book(self, start, end):
        meeting = Interval(start, end)
        for other in self.meetings:
            if overlaps(meeting, other):
                raise Conflict(f"{meeting} overlaps {other}")
        self.meetings.append(meeting)
        self.meetings.sort()
        return meeting

    def free_slots(self):
        """The free intervals of the day between meetings, in order."""
        slots = []
        cursor = self.day.start
        for meeting in self.meetings:
            if meeting.start >= cursor:
                slots.append((cursor, meeting.start))
            cursor = max(cursor, meeting.end)
        if cursor <= self.day.end:
            slots.append((cursor, self.day.end))
        return [Interval(start, end) for start, end in slots]
