"""Clocks: the real one, and a manual one for tests."""

import time


def monotonic():
    return time.monotonic()


class ManualClock:
    def __init__(self, start=0.0):
        self.now = start

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds
