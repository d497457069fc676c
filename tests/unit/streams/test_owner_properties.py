"""Property: duplicates, stale attempts and idle ticks interleaved anywhere change nothing."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.actions import RunCommand, Submit
from tests.unit.streams.world import Driver, Input, Tick, Workers, start_command


def clean_run() -> tuple[list[tuple[Input, int]], list[tuple[int, Input]], Driver]:
    """The clean inputs (with their times), noise (available from an index on), and the clean driver.

    The policy's first attempt times out, so its late answer is a stale attempt afterwards."""
    driver, workers = Driver(), Workers()
    inputs: list[tuple[Input, int]] = []
    noise: list[tuple[int, Input]] = []

    def give(item: Input) -> None:
        driver.feed(item)
        inputs.append((item, driver.now_us))
        noise.append((len(inputs), item))  # a redelivery can only follow the delivery
        noise.append((len(inputs), Tick(driver.now_us)))  # nothing is due right after an input

    give(start_command())
    late = workers.act(driver.last_request)
    deadline = driver.state.outstanding.deadline_us if driver.state.outstanding else 0
    give(Tick(deadline))
    noise.append((len(inputs), late))
    answer = workers.act(driver.last_request, RunCommand("make"))
    noise.append((0, dataclasses.replace(answer, meta=dataclasses.replace(answer.meta, prev_hash="e" * 64))))
    give(answer)
    give(workers.execute(driver.last_request))
    give(workers.act(driver.last_request, Submit()))
    give(workers.grade(driver.last_request))
    return inputs, noise, driver


INPUTS, NOISE, CLEAN = clean_run()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_noise_anywhere_leaves_the_clean_outcome(data: st.DataObject) -> None:
    schedule: list[tuple[int, int, Input]] = []  # (after clean input #, tie-break, input)
    for order, (start, item) in enumerate(NOISE):
        if data.draw(st.booleans()):
            schedule.append((data.draw(st.integers(start, len(INPUTS))), order, item))
    schedule.sort(key=lambda entry: (entry[0], data.draw(st.integers(0, 3)), entry[1]))
    driver = Driver()
    noisy = 0
    for position in range(len(INPUTS) + 1):
        for _, _, item in (entry for entry in schedule if entry[0] == position):
            out = driver.feed(item, at_us=driver.now_us)
            assert out.events == () and out.requests == () and out.trajectory is None
            noisy += 1
        if position < len(INPUTS):
            item, at_us = INPUTS[position]
            assert driver.feed(item, at_us=at_us).rejected is None
    assert noisy == len(schedule)
    assert driver.state == CLEAN.state
    digests = [a.digest for a in driver.appended]
    assert digests == [a.digest for a in CLEAN.appended] and len(set(digests)) == len(digests)
    assert [out.trajectory for out in driver.effects if out.trajectory] == [
        out.trajectory for out in CLEAN.effects if out.trajectory
    ]
