"""The fault tests' wait for a moment of the run (`tests.integration.fault_helpers.wait_for_moment`): the
run's end fails it only when the log, read up to a while after that end, still does not show the moment."""

from __future__ import annotations

import pytest

from tests.integration import fault_helpers
from tests.integration.fault_helpers import LogView, wait_for_moment


class LaggingReader:
    """A reader that shows the log's last episode end only on its `lag`-th poll (a broker just healed)."""

    def __init__(self, lag: int) -> None:
        self.view = LogView()
        self.polls = 0
        self.lag = lag

    def poll(self) -> LogView:
        self.polls += 1
        if self.polls >= self.lag:
            self.view.ended["e-200"] = "completed"
        return self.view


def wait(reader: LaggingReader, *, run_ended: bool, dead: tuple[str, ...] = ()) -> LogView:
    return wait_for_moment(
        "an episode ending after 'cut off broker'", lambda v: bool(v.ended), reader,
        dead=lambda: dead, run_ended=lambda: run_ended, tails=lambda: "(logs)", timeout_s=5, every_s=0.01,
    )  # fmt: skip


def test_a_moment_the_reader_shows_after_the_run_ended_is_met() -> None:
    reader = LaggingReader(lag=5)
    assert wait(reader, run_ended=True).ended == {"e-200": "completed"}
    assert reader.polls == 5


def test_a_moment_the_log_never_shows_fails_once_the_run_has_ended_for_the_read_up_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fault_helpers, "READ_UP_S", 0.05)
    with pytest.raises(AssertionError, match="the run ended before the faults did"):
        wait(LaggingReader(lag=10**9), run_ended=True)


def test_a_worker_that_exited_fails_the_wait_at_once() -> None:
    reader = LaggingReader(lag=1)
    with pytest.raises(AssertionError, match=r"\['rollout'\] exited early"):
        wait(reader, run_ended=False, dead=("rollout",))
    assert reader.polls == 0
