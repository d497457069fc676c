"""Episode timelines from logged events (`ops.replay`), on logs built with `EpisodeScript`."""

from __future__ import annotations

import pytest

from ops.replay import bounded, build_timeline, describe_action, parse_time, render
from ops.runlog import LoggedRun
from schemas.actions import ApplyPatch, RunCommand, Submit, WriteFile
from schemas.blobs import BlobRef
from schemas.common import FailureClass
from schemas.events import EpisodeEvent
from tests.unit.ops.test_audit import Episode, RunLog, healthy_run


def _events(log: RunLog, episode: str) -> list[EpisodeEvent]:
    return [logged.event for logged in LoggedRun.collect(log.records).episodes[episode].events]


def test_a_completed_episode_has_one_line_per_step_with_its_observation_snapshot_and_reward() -> None:
    timeline = build_timeline("ep-1", _events(healthy_run(2), "ep-1"), output_chars=100)
    assert timeline.outcome == "completed" and timeline.reward == 1.0 and timeline.verdict == "pass"
    assert not timeline.partial and timeline.events == 8
    ls, make, submit = timeline.steps
    assert (ls.step, ls.action, ls.exit_code, ls.stdout) == (0, "run: ls", 0, "ok\n")
    assert ls.snapshot_id == "snap-ep-1-0-1" and make.snapshot_id == "snap-ep-1-1-1"
    assert ls.sandbox_us == 50_000 and make.sandbox_us == 51_000
    assert ls.proposed_at_us < (ls.executed_at_us or 0) < make.proposed_at_us  # offsets in log order
    assert submit.submitted and submit.exit_code is None
    assert (submit.reward, submit.verdict, submit.snapshot_id) == (1.0, "pass", "snap-ep-1-1-1")
    text = render(timeline)
    assert "completed: reward 1 (pass)" in text and "snapshot snap-ep-1-0-1" in text and "run: make" in text


def test_a_log_read_from_the_middle_gives_a_partial_timeline() -> None:
    events = _events(healthy_run(1), "ep-0")[3:]  # from the second step's ActionProposed on
    timeline = build_timeline("ep-0", events, output_chars=100)
    assert timeline.partial and timeline.outcome == "completed"
    assert [line.step for line in timeline.steps] == [1, 2]
    assert "partial" in render(timeline)


def test_a_failed_episode_says_its_class_and_reason() -> None:
    log = RunLog()
    Episode(log, "ep-f").start().step("ls").fail(FailureClass.SANDBOX_TIMEOUT)
    timeline = build_timeline("ep-f", _events(log, "ep-f"), output_chars=100)
    assert (timeline.outcome, timeline.failure, timeline.reason) == ("failed", "sandbox_timeout", "gave up")
    assert "failed: sandbox_timeout (gave up)" in render(timeline)


def test_long_output_is_bounded_and_says_how_much_was_left_out() -> None:
    assert bounded("abcdef", 10) == "abcdef"
    assert bounded("abcdefghij" * 3, 10) == "abcdefghij... [20 more characters]"


def test_actions_are_summarised() -> None:
    assert describe_action(RunCommand("pytest -q")) == "run: pytest -q"
    assert describe_action(WriteFile("a/b.py", b"xyz")) == "write_file a/b.py (3 bytes)"
    assert describe_action(WriteFile("big", BlobRef("0" * 64, 99))) == "write_file big (99 bytes)"
    diff = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    assert describe_action(ApplyPatch(diff)) == "apply_patch (1 files, 5 lines)"
    assert describe_action(Submit()) == "submit" and describe_action(Submit("done")) == "submit: done"


def test_times_are_read_as_iso_8601_or_epoch_seconds() -> None:
    assert parse_time("1700000000") == 1_700_000_000_000
    assert parse_time("1700000000.5") == 1_700_000_000_500
    assert parse_time("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_time("2023-11-14T22:13:20") == 1_700_000_000_000  # UTC unless it says otherwise
    assert parse_time("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ValueError, match="not a time"):
        parse_time("yesterday")
