"""The operator's guard commands on real Kafka: `trialog quarantine --version` (dry run: nothing written;
then the rule on run.control), `run status --json` and `audit --json` showing it, the learner's control
feed reading it, and a pause/resume round trip."""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

import pytest
from kafka import KafkaProducer

from learner import testing
from learner.kafka_io import KafkaControlFeed
from ops.cli.main import main as trialog
from ops.guard_log import read_control_records
from schemas.codec import default_codec
from schemas.run_control import RunPaused, RunResumed, TrajectoriesQuarantined
from schemas.topics import RUN_CONTROL, TRAJECTORIES_COMPLETED, topic_name
from streams.kafka.topics import ensure_topics
from tests.unit.actors.guard_records import GRADED_AT, VERSIONS, graded

CODEC = default_codec()
FAULTY_IMAGE = "sha256:" + "5e" * 32


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = trialog(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    shown: dict[str, Any] = json.loads(captured.out)
    return shown


def _control(bootstrap: str, run: str) -> list[object]:
    return [CODEC.decode(r.value or b"") for r in read_control_records(bootstrap, run, 20)]


def test_quarantine_status_audit_and_pause_resume_on_a_real_run(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = f"guard{uuid.uuid4().hex[:6]}"
    ensure_topics(kafka_bootstrap, run)
    faulty = dataclasses.replace(VERSIONS, image=FAULTY_IMAGE)
    trajectories = [
        graded(testing.trajectory(run_id=run, episode_id=f"{run}-e{i}", group_id=f"{run}/g0"),
               faulty if i < 2 else VERSIONS, GRADED_AT + i)
        for i in range(3)
    ]  # fmt: skip
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        for t in trajectories:
            producer.send(topic_name(run, TRAJECTORIES_COMPLETED.name), key=t.meta.task_id.encode(),
                          value=CODEC.encode(t))  # fmt: skip
        producer.flush(timeout=30)
    finally:
        producer.close()
    where = ("--bootstrap", kafka_bootstrap, "--timeout", "20", "--json")

    dry = _cli(
        capsys, "quarantine", run, "--version", "5e5e5e5e", "--component", "image", "--dry-run", *where
    )
    assert dry["dry_run"] is True and dry["written"] is False
    assert [row["episode"] for row in dry["matched"]] == [f"{run}-e0", f"{run}-e1"]
    assert dry["rule"]["value"] == FAULTY_IMAGE  # the prefix resolved to the version the run saw
    assert _control(kafka_bootstrap, run) == []  # a dry run writes nothing

    done = _cli(capsys, "quarantine", run, "--version", "5e5e5e5e", "--reason", "image rebuilt", *where)
    assert done["written"] is True
    [rule] = _control(kafka_bootstrap, run)
    assert isinstance(rule, TrajectoriesQuarantined)
    assert rule.episode_ids == (f"{run}-e0", f"{run}-e1") and rule.component == "version"
    assert rule.reason == "image rebuilt" and rule.meta.producer.kind == "operator"

    status = _cli(capsys, "run", "status", run, *where[:2], "--json")["guard"]
    assert (status["paused"], status["quarantine_rules"], status["quarantined"]) == (False, 1, 2)
    audit = _cli(capsys, "audit", run, *where)
    assert audit["healthy"] is True and audit["quarantined"]["trajectories"] == 2
    [listed] = audit["quarantined"]["rules"]
    assert listed["rule"] == rule.rule_id and listed["episodes"] == [f"{run}-e0", f"{run}-e1"]

    feed = KafkaControlFeed(kafka_bootstrap, run)  # what the learner reads at its start, then polls
    try:
        assert feed.poll() == [rule] and feed.poll() == []

        paused = _cli(
            capsys, "run", "pause", run, "--reason", "canary c1 graded wrongly", *where[:2], "--json"
        )
        assert paused["written"] is True and paused["paused"] is True
        assert _cli(capsys, "run", "status", run, *where[:2], "--json")["guard"]["pause_reason"] == (
            "canary c1 graded wrongly"
        )
        resumed = _cli(capsys, "run", "resume", run, "--reason", "fixed", *where[:2], "--json")
        assert resumed["written"] is True and resumed["paused"] is False
        again = _cli(capsys, "run", "resume", run, *where[:2], "--json")
        assert again["written"] is False and "not paused" in again["message"]
        new = feed.poll()
        assert [type(r) for r in new] == [RunPaused, RunResumed]
    finally:
        feed.close()
    assert len(_control(kafka_bootstrap, run)) == 3
    assert topic_name(run, RUN_CONTROL.name) == f"{run}.run.control"
