"""The audit side's commands share their options; the progress bar draws only when asked to."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.cli.main import build_parser
from ops.progress import ProgressBar
from schemas.object_stores import StoreLocation


def test_replay_reproduce_report_and_audit_share_the_log_options() -> None:
    parser = build_parser()
    common = ["--bootstrap", "127.0.0.1:9", "--timeout", "5"]
    replay = parser.parse_args(["replay", "r1", "--episode", "e1", "--from", "2026-11-30T17:00:00Z", *common])
    assert (replay.run, replay.episode, replay.since, replay.bootstrap, replay.timeout) == (
        "r1", ["e1"], "2026-11-30T17:00:00Z", "127.0.0.1:9", 5.0,
    )  # fmt: skip
    reproduce = parser.parse_args(
        ["reproduce", "e1", "--run", "r1", "--objects", "/o", "--tasks", "/t", *common]
    )
    assert (reproduce.episode, reproduce.run, reproduce.objects, reproduce.tasks) == (
        "e1", "r1", StoreLocation(folder=Path("/o")), [Path("/t")],
    )  # fmt: skip
    audit = parser.parse_args(["audit", "r1", "--recheck", "--objects", "/o", "--json", *common])
    assert audit.recheck and audit.objects == StoreLocation(folder=Path("/o")) and audit.timeout == 5.0
    report = parser.parse_args(["report", "r1", "--out", "/tmp/x", *common])
    assert report.out == Path("/tmp/x") and report.bootstrap == "127.0.0.1:9"


def test_the_progress_bar_is_silent_unless_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    with ProgressBar(3, "quiet", quiet=True) as bar:
        bar.advance("one")
    assert not bar.enabled and capsys.readouterr().err == ""
    with ProgressBar(2, "checking", enabled=True) as bar:
        bar.advance("a")
        bar.update(2, "done")
    assert "checking" in capsys.readouterr().err
