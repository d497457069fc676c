"""The streams worker as a process on real Kafka: this test plays the rollout, sandbox and verifier workers.

One episode runs to completion through `trialog worker streams`; a duplicate answer appends nothing; the
worker is killed with SIGKILL in the middle of the episode and restarted, and the episode still completes
with every event logged once and a chain that verifies.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from schemas.actions import Submit
from schemas.blobs import BlobRef
from schemas.chain import digest, verify_chain
from schemas.codec import default_codec
from schemas.common import Producer, RecordMeta
from schemas.deadletter import DeadLetter
from schemas.events import EPISODE_EVENT_TYPES
from schemas.fold import fold
from schemas.publications import TaskPublished
from schemas.record import Record
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.state import Phase
from schemas.topics import TOPICS, topic_name
from schemas.trajectories import TrajectoryCompleted
from streams.app import FAULT_ENV
from streams.kafka.topics import ensure_topics
from streams.skipped import GRACE_S
from tests.unit.streams.world import EPISODE, TASK, Workers, start_command

CODEC = default_codec()
ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = {spec.name: spec.partitions for spec in TOPICS}


class Bus:
    """The test's side of the broker: a producer and a consumer of every topic of the run from the start."""

    def __init__(self, bootstrap: str, run: str) -> None:
        self.run = run
        self.producer = KafkaProducer(bootstrap_servers=bootstrap)
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        bases = (
            "policy.requests",
            "sandbox.requests",
            "verify.requests",
            "trajectories.completed",
            "trajectories.failed",
            "deadletter",
            "episode.events",
        )
        self.base = {topic_name(run, b): b for b in bases}
        self.consumer.assign(
            [TopicPartition(t, p) for t, b in self.base.items() for p in range(PARTITIONS[b])]
        )
        self.consumer.seek_to_beginning()
        self.seen: dict[str, list[tuple[bytes, Record]]] = {b: [] for b in bases}

    def send(self, base: str, key: str, record: Record) -> None:
        self.producer.send(topic_name(self.run, base), key=key.encode(), value=CODEC.encode(record))
        self.producer.flush()

    def poll(self) -> list[tuple[str, Record]]:
        fresh = []
        for tp, records in self.consumer.poll(timeout_ms=200).items():
            base = self.base[tp.topic]
            for r in records:
                value = CODEC.decode(r.value)
                self.seen[base].append((r.value, value))
                fresh.append((base, value))
        return fresh

    def close(self) -> None:
        self.producer.close()
        self.consumer.close()


class StreamsWorker:
    def __init__(self, bootstrap: str, run: str, data_dir: Path, log: Path) -> None:
        self.args = [
            sys.executable,
            "-m",
            "ops.cli",
            "worker",
            "streams",
            "--bootstrap",
            bootstrap,
            "--run",
            run,
            "--data-dir",
            str(data_dir),
            "--instance",
            "it-streams",
        ]
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, fault: str = "") -> None:
        env = {**os.environ, FAULT_ENV: fault}
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env
            )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def run(kafka_bootstrap: str) -> str:
    name = f"it{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, name)
    return name


@pytest.fixture
def bus(kafka_bootstrap: str, run: str) -> Iterator[Bus]:
    bus = Bus(kafka_bootstrap, run)
    yield bus
    bus.close()


def _task() -> TaskPublished:
    meta = RecordMeta("task-pub-1", 1, Producer("tasks", "it"))
    bundle = BlobRef(hashlib.sha256(b"bundle").hexdigest(), 6)
    return TaskPublished(
        meta,
        TASK.task_id,
        TASK.task_version,
        TASK.instruction,
        TASK.image,
        TASK.timeout_s,
        "pytest",
        None,
        (),
        bundle,
    )


def _answer(bus: Bus, workers: Workers, record: Record) -> None:
    """Play the worker a request is for: one `ls` step, then submit; a grade of 1.0."""
    if isinstance(record, PolicyRequest):
        action = Submit("done") if record.meta.step >= 1 else workers.act(record).action
        bus.send("policy.results", EPISODE, workers.act(record, action))
    elif isinstance(record, SandboxRequest):
        bus.send("sandbox.results", EPISODE, workers.execute(record))
    elif isinstance(record, VerifyRequest):
        bus.send("verify.results", EPISODE, workers.grade(record))


def _assert_logged_once(bus: Bus) -> None:
    end = time.monotonic() + 2  # late events (there must be none) would arrive by now
    while time.monotonic() < end:
        bus.poll()
    values = [value for value, _ in bus.seen["episode.events"]]
    events = [e for _, e in bus.seen["episode.events"] if isinstance(e, EPISODE_EVENT_TYPES)]
    report = verify_chain(values, CODEC)
    assert report.ok and report.duplicates == 0, report
    assert [type(e).__name__ for e in events] == [
        "EpisodeStarted",
        "ActionProposed",
        "StepExecuted",
        "ActionProposed",
        "RewardAssigned",
        "EpisodeCompleted",
    ]
    assert len({e.meta.event_id for e in events}) == len(events)
    assert fold((e, digest(v)) for e, v in zip(events, values, strict=True)).phase is Phase.COMPLETED
    completed = [t for _, t in bus.seen["trajectories.completed"] if isinstance(t, TrajectoryCompleted)]
    assert completed and all(t.meta.episode_id == EPISODE and t.reward == 1.0 for t in completed)
    assert len(completed[0].steps) == 2


def test_a_crash_between_the_appends_and_the_row_write_duplicates_nothing(
    kafka_bootstrap: str, run: str, bus: Bus, tmp_path: Path
) -> None:
    """The worker dies (exit 137) after the StepExecuted was appended and the next PolicyRequest sent, before
    the row was written; the restarted worker folds the log's tail into the stale row, resends the request
    with the same key, and the redelivered StepExecuted is a duplicate."""
    log = tmp_path / "worker.log"
    worker = StreamsWorker(kafka_bootstrap, run, tmp_path / "data", log)
    workers = Workers()
    bus.send("tasks", TASK.task_id, _task())
    worker.start(fault="crash_before_row:3")  # effects 1: start, 2: action, 3: executed
    restarted = False
    try:
        bus.send("episode.commands", EPISODE, start_command())
        deadline = time.monotonic() + 75
        while not bus.seen["trajectories.completed"]:
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            assert worker.process is not None
            code = worker.process.poll()
            if code is not None:
                assert code == 137 and not restarted, log.read_text()[-4000:]
                worker.start()
                restarted = True
            for _base, record in bus.poll():
                _answer(bus, workers, record)
    finally:
        worker.stop()
    assert restarted
    _assert_logged_once(bus)
    assert "1 episodes moved" in log.read_text()
    _assert_ignored_not_dead_lettered(bus, log)


def test_an_input_given_back_that_nobody_delivers_again_is_read_again_from_kafka(
    kafka_bootstrap: str, run: str, bus: Bus, tmp_path: Path
) -> None:
    """The StartEpisode command is given back unhandled (as during a rebalance) with no rebalance to deliver
    it again: the commit stands at it; after `streams.skipped.GRACE_S` the worker reads it from Kafka
    itself, and the episode runs as usual, every event logged once."""
    log = tmp_path / "worker.log"
    worker = StreamsWorker(kafka_bootstrap, run, tmp_path / "data", log)
    workers = Workers()
    bus.send("tasks", TASK.task_id, _task())
    worker.start(fault="give_back:1")
    try:
        bus.send("episode.commands", EPISODE, start_command())
        sent = time.monotonic()
        deadline = sent + 75
        while not bus.seen["trajectories.completed"]:
            assert time.monotonic() < deadline, log.read_text()[-4000:]
            assert worker.process is not None and worker.process.poll() is None, "the worker died"
            for _base, record in bus.poll():
                _answer(bus, workers, record)
        assert time.monotonic() - sent >= GRACE_S  # not before the grace: nobody delivered it again
    finally:
        worker.stop()
    text = log.read_text()
    assert "input 1 given back" in text and "1 of them read again from Kafka, 1 handled" in text, text[-4000:]
    _assert_logged_once(bus)


def test_an_episode_survives_a_killed_worker_without_duplicate_events(
    kafka_bootstrap: str, run: str, bus: Bus, tmp_path: Path
) -> None:
    worker = StreamsWorker(kafka_bootstrap, run, tmp_path / "data", tmp_path / "worker.log")
    workers = Workers()
    bus.send("tasks", TASK.task_id, _task())
    worker.start()
    try:
        bus.send("episode.commands", EPISODE, start_command())
        killed = duplicated = False
        deadline = time.monotonic() + 75
        while not bus.seen["trajectories.completed"]:
            assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-4000:]
            assert worker.process is not None and worker.process.poll() is None, "the worker died"
            for _base, record in bus.poll():
                if isinstance(record, PolicyRequest) and not duplicated:
                    answer = workers.act(record)
                    bus.send("policy.results", EPISODE, answer)
                    bus.send("policy.results", EPISODE, answer)  # redelivered: must append nothing
                    duplicated = True
                    continue
                if isinstance(record, SandboxRequest) and not killed:
                    worker.kill()  # SIGKILL with the request in flight; the restarted worker resends it
                    killed = True
                    worker.start()
                _answer(bus, workers, record)
        # The duplicate may reach the restarted worker while it still recovers: it gives such an input back
        # and reads it again from the committed offset, possibly after the trajectory is out.
        _wait_until_logged(tmp_path / "worker.log", "ignored (duplicate)", timeout_s=30)
    finally:
        worker.stop()
    _assert_logged_once(bus)
    _assert_ignored_not_dead_lettered(bus, tmp_path / "worker.log")


def _wait_until_logged(log: Path, text: str, timeout_s: float) -> None:
    """Wait until the worker's log says `text`; on giving up, fail with the log's tail (what CI needs)."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text():
        assert time.monotonic() < deadline, (
            f"{text!r} not logged in {timeout_s:.0f} s:\n{log.read_text()[-4000:]}"
        )
        time.sleep(0.2)


def _assert_ignored_not_dead_lettered(bus: Bus, log: Path) -> None:
    """A redelivered answer is expected after a crash: logged as ignored, never a dead letter."""
    assert "ignored (duplicate)" in log.read_text()
    assert [d.reason for _, d in bus.seen["deadletter"] if isinstance(d, DeadLetter)] == []
