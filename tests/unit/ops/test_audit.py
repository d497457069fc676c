"""The audit over logs built with `EpisodeScript`: healthy, duplicated, tampered, silent, failed, redone."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict

import pytest

from ops.audit import EVENTS, LogRecord, audit
from ops.cli import audit as audit_cli
from ops.cli import kit
from ops.cli.audit import register
from ops.cli.main import main as trialog
from ops.runlog import LogReadError
from schemas.actions import RunCommand, Submit
from schemas.codec import Codec, default_codec
from schemas.common import EpisodeConfig, FailureClass, Verdict
from schemas.origin import FixedClock
from schemas.requests import PolicyRequest, SamplingParams, SandboxRequest, VerifyRequest
from schemas.testing import EpisodeScript
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

CODEC = default_codec()
START_US = 1_700_000_000_000_000


class RunLog:
    """Records of a run in append order, with per-(topic, partition) offsets, as Kafka would hand them out."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self._next: dict[tuple[str, int], int] = defaultdict(int)

    def add(self, topic: str, value: bytes, key: str, partition: int = 0) -> LogRecord:
        offset = self._next[(topic, partition)]
        self._next[(topic, partition)] += 1
        record = LogRecord(topic, partition, offset, key.encode(), value, 0)
        self.records.append(record)
        return record


class Episode:
    """An `EpisodeScript` that also writes what its owner sends: requests and the trajectory."""

    def __init__(
        self,
        log: RunLog,
        episode_id: str,
        codec: Codec = CODEC,
        start_us: int = START_US,
        max_steps: int = 16,
    ) -> None:
        self.log = log
        config = EpisodeConfig(max_steps=max_steps)
        self.script = EpisodeScript(codec, episode_id=episode_id, clock=FixedClock(start_us), config=config)
        self.codec = codec

    def _event(self) -> None:
        self.log.add(EVENTS, self.script.records[-1], self.script.episode_id)

    def _request(self, topic: str, request: PolicyRequest | SandboxRequest | VerifyRequest) -> None:
        self.log.add(topic, self.codec.encode(request), self.script.episode_id)

    def start(self) -> Episode:
        self.script.start()
        self._event()
        return self

    def step(self, command: str = "ls", *, attempts: int = 1) -> Episode:
        for attempt in range(1, attempts + 1):
            meta = self.script.meta("streams", attempt)
            self._request("policy.requests", PolicyRequest(meta, "Fix it.", (), SamplingParams()))
        self.script.act(RunCommand(command), attempt=attempts)
        self._event()
        for attempt in range(1, attempts + 1):
            meta = self.script.meta("streams", attempt)
            self._request("sandbox.requests", SandboxRequest(meta, "img", RunCommand(command), 30.0, 4096))
        self.script.execute(stdout=b"ok\n", attempt=attempts)
        self._event()
        return self

    def finish(self, *, verify_attempts: int = 1, submit: bool = True) -> Episode:
        """Submit and get graded; `submit=False`: graded at the step limit (truncated), no submit."""
        if submit:
            meta = self.script.meta("streams")
            self._request("policy.requests", PolicyRequest(meta, "Fix it.", (), SamplingParams()))
            self.script.act(Submit())
            self._event()
        for attempt in range(1, verify_attempts + 1):
            self._request("verify.requests", VerifyRequest(self.script.meta("streams", attempt), "img", 60.0))
        self.script.reward(1.0, Verdict.PASS, attempt=verify_attempts)
        self._event()
        self.script.complete()
        self._event()
        self.trajectory()
        return self

    def trajectory(self) -> None:
        meta = dataclasses.replace(self.script.meta("streams"), prev_hash=self.script.head)
        completed = TrajectoryCompleted(meta, "group-1", "Fix it.", (), 1.0, Verdict.PASS, 3, 3, 1, 1)
        self.log.add("trajectories.completed", self.codec.encode(completed), self.script.task_id)

    def fail(self, failure: FailureClass) -> Episode:
        self.script.fail(failure, "gave up")
        self._event()
        failed = TrajectoryFailed(self.script.meta("streams"), failure, "gave up", ())
        self.log.add("trajectories.failed", self.codec.encode(failed), self.script.episode_id)
        return self


def healthy_run(episodes: int = 3) -> RunLog:
    log = RunLog()
    for index in range(episodes):
        Episode(log, f"ep-{index}").start().step("ls").step("make").finish()
    return log


def test_a_healthy_run_is_healthy() -> None:
    report = audit(healthy_run().records)
    out = report.to_json()
    assert report.healthy and report.exit_code == 0
    assert out["started"] == 3 and out["completed"] == 3 and out["failed"] == {}
    assert out["in_flight"] == 0 and out["lost"] == 0
    assert out["duplicate_steps"] == 0 and out["broken_chains"] == 0 and out["undecodable"] == {}
    assert out["fold_errors"] == 0
    assert out["trajectories"] == {"completed": 3, "failed": 0, "repeated": 0}
    assert out["redone"] == {"policy": 0, "sandbox": 0, "verify": 0}
    assert out["episodes_with_errors"] == []
    json.dumps(out)  # serialisable as is
    assert "healthy" in report.table()


def test_an_event_appended_twice_is_a_duplicate_step_not_a_broken_chain() -> None:
    log = healthy_run(2)
    again = next(r for r in log.records if r.topic == EVENTS and r.key == b"ep-1" and r.offset > 8)
    log.records.append(dataclasses.replace(again, offset=again.offset + 100))
    report = audit(log.records)
    assert report.duplicate_steps == 1 and report.broken_chains == 0 and report.fold_errors == 0
    assert not report.healthy and report.exit_code == 1
    (error,) = report.errors
    assert error.episode == "ep-1" and error.kind == "duplicate_step" and "appended again" in error.detail


def test_the_same_step_appended_under_another_event_id_is_a_duplicate() -> None:
    log = RunLog()
    episode = Episode(log, "ep-x").start()
    script = episode.script
    head = script.head
    script.act(RunCommand("ls"))
    episode._event()
    script.head = head  # a second owner, unaware of the first, appends the same slot again
    script.log.pop()
    script.act(RunCommand("ls"))
    episode._event()
    report = audit(log.records)
    assert report.duplicate_steps == 1
    assert report.broken_chains == 1  # both link to the same head: the second does not link to the first
    assert any(e.kind == "duplicate_step" and "appended again as" in e.detail for e in report.errors)


def test_a_flipped_byte_breaks_the_chain() -> None:
    log = healthy_run(2)
    index = next(i for i, r in enumerate(log.records) if r.topic == EVENTS and r.key == b"ep-0")
    original = log.records[index]
    assert original.value is not None
    at = original.value.index(b"task-hello")
    tampered = bytearray(original.value)
    tampered[at + len("task-hell")] ^= 0x01  # task-hello -> task-helln: still decodes, hashes differently
    log.records[index] = dataclasses.replace(original, value=bytes(tampered))
    report = audit(log.records)
    out = report.to_json()
    assert out["broken_chains"] == 1 and out["undecodable"] == {} and out["duplicate_steps"] == 0
    assert report.exit_code == 1
    broken = [e for e in report.errors if e.kind == "broken_chain"]
    assert [(e.episode, e.position) for e in broken] == [("ep-0", 1)]
    assert broken[0].where == "episode.events[0]@1"
    assert any(e.kind == "fold_error:broken_chain" and e.position == 1 for e in report.errors)


def test_an_episode_that_went_silent_is_lost_and_a_recent_one_in_flight() -> None:
    log = RunLog()
    Episode(log, "ep-silent").start().step("ls")
    Episode(log, "ep-busy", start_us=START_US + 900 * 1_000_000).start().step("ls")
    Episode(log, "ep-done", start_us=START_US + 1_000 * 1_000_000).start().finish()
    report = audit(log.records)
    assert (report.started, report.completed, report.in_flight, report.lost) == (3, 1, 1, 1)
    (lost,) = report.errors
    assert lost.episode == "ep-silent" and lost.kind == "lost" and "StepExecuted at step 0" in lost.detail
    assert report.exit_code == 1
    # With a longer threshold the silent one is only slow.
    assert audit(log.records, stale_after_s=3_600).to_json()["in_flight"] == 2


def test_an_episode_graded_at_the_step_limit_counts_as_completed() -> None:
    log = healthy_run(1)
    Episode(log, "ep-truncated", max_steps=2).start().step("ls").step("make").finish(submit=False)
    report = audit(log.records)
    out = report.to_json()
    assert out["started"] == 2 and out["completed"] == 2 and out["failed"] == {}
    assert report.healthy and out["trajectories"] == {"completed": 2, "failed": 0, "repeated": 0}


def test_failed_episodes_are_counted_by_class_and_are_healthy() -> None:
    log = healthy_run(1)
    Episode(log, "ep-timeout").start().step("ls").fail(FailureClass.SANDBOX_TIMEOUT)
    Episode(log, "ep-limit").start().step("ls").fail(FailureClass.STEP_LIMIT)
    Episode(log, "ep-limit2").start().fail(FailureClass.STEP_LIMIT)
    out = audit(log.records).to_json()
    assert out["started"] == 4 and out["completed"] == 1
    assert out["failed"] == {"sandbox_timeout": 1, "step_limit": 2}
    assert out["lost"] == 0 and out["in_flight"] == 0 and out["healthy"] is True
    assert out["trajectories"] == {"completed": 1, "failed": 3, "repeated": 0}


def test_reissued_requests_count_as_redone_steps_per_kind() -> None:
    log = RunLog()
    Episode(log, "ep-a").start().step("ls", attempts=2).step("make", attempts=3).finish(verify_attempts=2)
    Episode(log, "ep-b").start().step("ls").finish()
    report = audit(log.records)
    assert report.redone == {"policy": 2, "sandbox": 2, "verify": 1}
    assert report.healthy and report.fold_errors == 0 and report.completed == 2


def test_a_trajectory_published_twice_is_repeated_not_a_duplicate_step() -> None:
    log = healthy_run(2)
    Episode(log, "ep-again").start().finish().trajectory()
    out = audit(log.records).to_json()
    assert out["trajectories"] == {"completed": 3, "failed": 0, "repeated": 1}
    assert out["duplicate_steps"] == 0 and out["healthy"] is True


@pytest.mark.parametrize(
    ("value", "reason"),
    [(b"junk", "too_short"), (b"not-avro-at-all", "wrong_magic"), (None, "too_short")],
)
def test_undecodable_records_are_counted_by_reason(value: bytes | None, reason: str) -> None:
    log = healthy_run(1)
    log.records.append(LogRecord("sandbox.requests", 3, 0, b"ep-zz", value))
    report = audit(log.records)
    assert report.undecodable == {reason: 1}
    assert report.healthy  # undecodable records are reported, but only a broken episode is unhealthy
    (error,) = report.errors
    assert (error.episode, error.kind, error.where) == ("ep-zz", "undecodable", "sandbox.requests[3]@0")


def test_a_record_of_the_wrong_type_for_its_topic_is_unexpected() -> None:
    log = healthy_run(1)
    request = next(r for r in log.records if r.topic == "verify.requests")
    log.records.append(dataclasses.replace(request, topic=EVENTS, offset=99))
    assert audit(log.records).undecodable == {"unexpected_type": 1}


def test_an_undecodable_event_breaks_its_episode_chain() -> None:
    log = healthy_run(1)
    index = next(i for i, r in enumerate(log.records) if r.topic == EVENTS and r.offset == 2)
    log.records[index] = dataclasses.replace(log.records[index], value=b"\xc3\x01" + b"\x00" * 12)
    report = audit(log.records)
    assert report.undecodable == {"unknown_fingerprint": 1}
    assert report.broken_chains == 1 and not report.healthy


def test_progress_is_reported_per_record() -> None:
    seen: list[int] = []
    log = healthy_run(1)
    audit(log.records, progress=seen.append)
    assert seen == list(range(1, len(log.records) + 1))


def test_a_topic_that_is_not_audited_is_refused() -> None:
    with pytest.raises(ValueError, match="not an audited topic"):
        audit(
            [
                LogRecord(
                    "policy.results",
                    0,
                    0,
                    None,
                    CODEC.encode(Episode(RunLog(), "e").start().script.events[0]),
                )
            ]
        )


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trialog")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["audit", *argv])


def test_the_audit_command_prints_a_table_and_exits_by_health(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = healthy_run(2)

    def read(bootstrap: str, run: str, **_: object) -> list[LogRecord]:
        assert (bootstrap, run) == ("kafka:9", "r1")
        return log.records

    monkeypatch.setattr(audit_cli, "read_run", read)
    monkeypatch.setattr(kit, "require_kafka", lambda bootstrap, *_: bootstrap)  # no broker here
    args = _parse(["r1", "--bootstrap", "kafka:9"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "episodes started  2" in out and "verdict           healthy" in out

    log.records.append(log.records[0])
    args = _parse(["r1", "--bootstrap", "kafka:9", "--json", "--stale-after", "5"])
    assert args.handler(args) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["run"] == "r1" and report["duplicate_steps"] == 1 and report["stale_after_s"] == 5.0


def test_the_audit_command_reports_an_unreadable_run_with_exit_code_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def read(bootstrap: str, run: str, **_: object) -> list[LogRecord]:
        raise LogReadError("cannot reach Kafka at kafka:9")

    monkeypatch.setattr(audit_cli, "read_run", read)
    monkeypatch.setattr(kit, "require_kafka", lambda bootstrap, *_: bootstrap)
    assert trialog(["audit", "r1", "--bootstrap", "kafka:9"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "trialog audit: cannot reach Kafka" in captured.err
    assert trialog(["audit", "r1", "--bootstrap", "kafka:9", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["error"] == "cannot reach Kafka at kafka:9" and "trialog status" in error["hint"]
