"""The operator's guard commands without a broker: `trialog quarantine`'s values and rules, `run pause` /
`run resume`, and the audit's quarantine section (from records, as Kafka or a bundle gives them)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import pytest

from actors.guard.control import VERSION, fold
from learner import testing
from ops import guard_log
from ops.audit import CONTROL, Auditor, LogRecord
from ops.cli import kit
from ops.cli.main import build_parser
from ops.cli.quarantine import check
from schemas.codec import default_codec
from schemas.run_control import ANY
from streams.errors import StackError
from tests.unit.actors.guard_records import GRADED_AT, IMAGE, RUN, VERIFIER, VERSIONS, graded, paused, rule
from tests.unit.ops.test_audit import healthy_run
from tests.unit.ops.test_cli_services import FAIL_FAST_S, _startup_s, _trialog, bare_env  # noqa: F401

NOW = 1_700_000_000_000_000
CODEC = default_codec()


# -- values -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("-30m", NOW - 30 * 60 * 10**6),
        ("-2h", NOW - 2 * 3600 * 10**6),
        ("-1d", NOW - 86400 * 10**6),
        ("-90s", NOW - 90 * 10**6),
        ("2023-11-14T22:13:20Z", NOW),
        ("2023-11-15T00:13:20+02:00", NOW),
    ],
)
def test_a_time_is_iso_with_a_zone_or_relative_to_now(text: str, expected: int) -> None:
    assert guard_log.parse_time(text, NOW) == expected


@pytest.mark.parametrize("text", ["2023-11-14T22:13:20", "yesterday", "-3w", "30m", ""])
def test_a_time_without_a_zone_or_a_known_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        guard_log.parse_time(text, NOW)


def test_a_version_prefix_is_at_least_8_hex_digits_except_a_task_version() -> None:
    assert guard_log.check_prefix("a1a1a1a1", "verifier") == "a1a1a1a1"
    assert guard_log.check_prefix("sha256:b2b2b2b2", "image") == "sha256:b2b2b2b2"
    assert guard_log.check_prefix("v1", "task") == "v1"
    for bad in ("a1a1a1", "sha256:b2", "zzzzzzzzzz", "A1A1A1A1x"):
        with pytest.raises(ValueError, match="at least 8 hex"):
            guard_log.check_prefix(bad, VERSION)


def test_a_prefix_names_one_version_the_run_saw_or_is_refused_with_the_candidates() -> None:
    seen = guard_log.seen_versions([graded(testing.trajectory())], VERSION)
    assert {VERIFIER, IMAGE, "v1"} <= seen
    assert guard_log.resolve_version("a1a1a1a1", VERSION, seen) == VERIFIER
    assert guard_log.resolve_version("b2b2b2b2", VERSION, seen) == IMAGE  # the digest without sha256:
    assert guard_log.resolve_version(IMAGE, "image", {IMAGE}) == IMAGE
    with pytest.raises(guard_log.GuardError, match="seen: "):
        guard_log.resolve_version("deadbeef", VERSION, seen)
    twins = {"abcdef0011", "abcdef0022"}
    with pytest.raises(guard_log.GuardError, match="names 2 versions: abcdef0011, abcdef0022"):
        guard_log.resolve_version("abcdef00", VERSION, twins)


# -- the command line -----------------------------------------------------------------------------------


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["quarantine", RUN, *argv])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "name what to quarantine"),
        (("--version", "a1a1a1a1", "--all", "--since=-1h"), "without --version"),
        (("--all",), "--all needs a time window"),
        (("--all", "--since=-1h", "--component", "image"), "--component does not apply"),
        (("--version", "a1a1a1a1", "--since=-1h", "--until=-2h"), "--until must be after --since"),
        (("--version", "a1a1"), "at least 8 hex"),
    ],
)
def test_quarantine_options_that_do_not_go_together_are_refused_before_kafka(
    argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(StackError, match=message):
        check(_args(*argv))


def test_quarantine_options_that_name_a_rule_pass() -> None:
    check(_args("--version", "a1a1a1a1"))
    check(_args("--version", "v1", "--component", "task", "--since=-1h"))
    args = _args("--since", "2023-11-14T22:13:20Z", "--until=-1m", "--all", "--dry-run", "--json")
    check(args)
    assert args.since == NOW and args.dry_run and args.json


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["quarantine", RUN, "--since", "yesterday"], "--since"),
        (["quarantine", RUN, "--until", "2023-11-14T22:13:20"], "--until"),
        (["quarantine", RUN, "--component", "colour"], "--component"),
        (["quarantine", "bad/run", "--all"], "RUN"),
        (["run", "pause", RUN], "--reason"),
        (["run", "resume", "a run"], "RUN"),
    ],
)
def test_bad_values_are_refused_when_parsed(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert option in capsys.readouterr().err


@pytest.mark.parametrize("command", [["quarantine"], ["run", "pause"], ["run", "resume"]])
def test_each_guard_command_shows_examples(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--help"])
    out = capsys.readouterr().out
    assert f"trialog {' '.join(command)}" in out.split("Examples:")[1]


NEEDS_KAFKA = [
    ["quarantine", "r1", "--version", "a1a1a1a1", "--dry-run"],
    ["run", "pause", "r1", "--reason", "why"],
    ["run", "resume", "r1"],
]


@pytest.mark.parametrize("argv", NEEDS_KAFKA, ids=[" ".join(a[:2]) for a in NEEDS_KAFKA])
def test_a_guard_command_without_kafka_answers_at_once_with_the_fix(
    argv: list[str],
    bare_env: dict[str, str],  # noqa: F811
    closed_port: Callable[[], int],
) -> None:
    closed = f"127.0.0.1:{closed_port()}"
    done, took = _trialog([*argv, "--bootstrap", closed, "--json"], bare_env)
    assert done.returncode == 2, done.stderr
    startup = _startup_s(bare_env)
    assert took - startup < FAIL_FAST_S, f"{took:.1f} s ({startup:.1f} s to start the CLI)"
    assert "Traceback" not in done.stderr and "trialog up" in done.stderr
    error = json.loads(done.stdout)
    assert error["error"] == f"no Kafka broker answers at {closed}" and error["hint"] == kit.KAFKA_HINT


def test_a_bad_combination_fails_before_looking_for_kafka(
    bare_env: dict[str, str],  # noqa: F811
    closed_port: Callable[[], int],
) -> None:
    done, _ = _trialog(["quarantine", "r1", "--all", "--bootstrap", f"127.0.0.1:{closed_port()}"], bare_env)
    assert done.returncode == 2 and "--all needs a time window" in done.stderr
    assert "Kafka" not in done.stderr


# -- the rule and what it matches -------------------------------------------------------------------------


def test_a_rule_lists_the_trajectories_it_matches_with_their_grade() -> None:
    good = graded(testing.trajectory(episode_id="good"), VERSIONS.__class__("ee" * 32, "sha256:" + "ee" * 32,
                  VERSIONS.tests, VERSIONS.reward_config))  # fmt: skip
    faulty = [graded(testing.trajectory(episode_id=f"bad{i}"), at_us=GRADED_AT + i) for i in range(2)]
    spec = guard_log.RuleSpec("image", IMAGE, reason="image rebuilt")
    draft = spec.draft(RUN, guard_log.operator_meta(NOW), "r-1")
    found = guard_log.matched(draft, [good, *faulty])
    rule_ = guard_log.with_episodes(draft, found)
    assert rule_.episode_ids == ("bad0", "bad1") and rule_.meta.producer.kind == "operator"
    rows = [guard_log.trajectory_row(t, fold(RUN, [])) for t in found]
    assert rows[0]["graded_at"] == "2023-11-14T22:15:00Z" and rows[0]["versions"]["image"] == IMAGE
    assert "bad1  task-1@v1  pass  +1.00  graded 2023-11-14T22:15:00Z  verifier a1a1" in guard_log.rows_table(
        rows
    )
    window = guard_log.RuleSpec(ANY, "", GRADED_AT + 1, None).draft(RUN, guard_log.operator_meta(NOW), "r-2")
    assert [t.meta.episode_id for t in guard_log.matched(window, [good, *faulty])] == ["bad1"]


# -- the audit's quarantine section -------------------------------------------------------------------------


def _control_record(value: object, offset: int) -> LogRecord:
    return LogRecord(CONTROL, 0, offset, None, CODEC.encode(value))


def test_the_audit_lists_quarantined_trajectories_by_rule_and_stays_healthy() -> None:
    log = healthy_run(3)
    auditor = Auditor()
    for record in log.records:
        auditor.add(record)
    episodes = sorted({r.key.decode() for r in log.records if r.key})
    by_ids = rule("image", "sha256:" + "00" * 32, rule_id="by-ids", episodes=(episodes[0],))
    unused = rule("verifier", "ff" * 32, rule_id="unused")
    for offset, value in enumerate([paused(run=RUN), by_ids, unused]):
        auditor.add(_control_record(value, offset))
    report = auditor.report()
    assert report.healthy
    shown = report.to_json()["quarantined"]
    assert shown["trajectories"] == 1
    assert [(r["rule"], r["episodes"]) for r in shown["rules"]] == [("by-ids", [episodes[0]]), ("unused", [])]
    table = report.table()
    assert "quarantined: 1 trajectories by 2 rules" in table and f"    {episodes[0]}" in table
    assert "verdict           healthy" in table


def test_an_audit_without_a_control_log_shows_no_quarantine() -> None:
    report = Auditor().report()
    assert report.to_json()["quarantined"] == {"trajectories": 0, "rules": []}
    assert "quarantined" not in report.table()


def test_a_record_of_another_type_on_the_control_log_is_undecodable_there() -> None:
    auditor = Auditor()
    auditor.add(LogRecord(CONTROL, 0, 0, None, CODEC.encode(testing.trajectory())))
    assert auditor.report().undecodable == {"unexpected_type": 1}


def test_the_audit_reads_the_control_log_from_a_bundle(tmp_path: Path) -> None:
    from ops.cli.audit import read_bundle
    from ops.run_bundle import Bundle, write_bundle
    from schemas.blobs import LocalObjectStore

    log = healthy_run(1)
    episode = next(r.key.decode() for r in log.records if r.key)
    from ops.audit import AUDITED_TOPICS

    topics: dict[str, list[LogRecord]] = {base: [] for base in AUDITED_TOPICS}
    for record in log.records:
        topics.setdefault(record.topic, []).append(record)
    topics[CONTROL] = [_control_record(rule("image", "sha256:" + "00" * 32, episodes=(episode,)), 0)]
    write_bundle(RUN, topics, LocalObjectStore(tmp_path / "objects"), tmp_path / "b", blobs="hashes")
    records = list(read_bundle(Bundle.open(tmp_path / "b")))
    assert records[-1].topic == CONTROL
    auditor = Auditor()
    for record in records:
        auditor.add(record)
    assert auditor.report().quarantine.trajectories == 1


# -- run pause / resume (the writer faked: the real one is in the integration test) -----------------------


class FakeWriter:
    written: ClassVar[list[object]] = []

    def __init__(self, bootstrap: str, run: str) -> None:
        self.topic = f"{run}.run.control"

    def write(self, record: object) -> None:
        FakeWriter.written.append(record)

    def close(self) -> None:
        pass


def test_pause_writes_a_pause_and_resume_of_a_run_not_paused_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from schemas.run_control import RunPaused

    log: list[object] = []
    FakeWriter.written = log
    monkeypatch.setattr(kit, "require_kafka", lambda bootstrap, *_: bootstrap)
    monkeypatch.setattr(guard_log, "ControlWriter", FakeWriter)
    monkeypatch.setattr(guard_log, "read_control", lambda bootstrap, run, *_: fold(run, log))

    def trialog(*argv: str) -> dict[str, object]:
        args = build_parser().parse_args([*argv, "--bootstrap", "kafka:9", "--json"])
        assert args.handler(args) == 0
        shown: dict[str, object] = json.loads(capsys.readouterr().out)
        return shown

    assert trialog("run", "resume", RUN) == {
        "run": RUN, "paused": False, "written": False, "message": f"run {RUN} is not paused: nothing written",
    }  # fmt: skip
    assert trialog("run", "pause", RUN, "--reason", "image suspect")["written"] is True
    [pause] = log
    assert isinstance(pause, RunPaused) and pause.reason == "image suspect" and pause.run_id == RUN
    assert pause.meta.producer.kind == "operator"
    again = trialog("run", "pause", RUN, "--reason", "twice")
    assert again["written"] is False and "already paused (image suspect)" in str(again["message"])
    assert trialog("run", "resume", RUN, "--reason", "fixed")["paused"] is False
    assert len(log) == 2 and not fold(RUN, log).is_paused
