"""The learner process on real Kafka, killed with SIGKILL twice mid-run: every trajectory is trained exactly
once and the published versions run 1, 2, 3, ... without a gap or a repeat."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer

from learner import checkpoint, testing
from ops.paths import REPO_ROOT
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.publications import PolicyPublished
from schemas.topics import TRAJECTORIES_COMPLETED
from tests.integration.actors.kafka_helpers import new_run, reading

CODEC = default_codec()
GROUPS, GROUP_SIZE = 18, 2
DEADLINE_S = 240.0


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    testing.tiny_llama().save_pretrained(folder)
    return folder


class LearnerProcess:
    def __init__(self, argv: list[str], log: Path) -> None:
        self.argv, self.log = argv, log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ))  # fmt: skip

    def kill(self) -> None:
        assert self.process is not None and self.process.poll() is None, self.log.read_text()[-3000:]
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


@pytest.fixture
def learner(
    tmp_path: Path, tiny_model_dir: Path, kafka_bootstrap: str
) -> Iterator[tuple[str, LearnerProcess]]:
    run = new_run(kafka_bootstrap, "learnerkill")
    argv = [sys.executable, "-m", "ops.cli", "worker", "learner", "--run", run,
            "--bootstrap", kafka_bootstrap, "--model", str(tiny_model_dir),
            "--group-size", str(GROUP_SIZE), "--max-staleness", "1000",
            "--groups-per-step", "1",  # one version per group: the kills fall between known versions
            "--lora-rank", "4", "--lr", "1e-2", "--threads", "1", "--prompt-encoder", "bytes",
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--objects", str(tmp_path / "objects")]  # fmt: skip
    process = LearnerProcess(argv, tmp_path / "learner.log")
    yield run, process
    process.stop()


def produce_groups(bootstrap: str, run: str, first: int, count: int) -> int:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    sent = 0
    try:
        for g in range(first, first + count):
            task = f"task-{g % 5}"
            for trajectory in testing.group(f"{run}/g{g:04d}", [1.0, 0.0], run_id=run, task_id=task):
                producer.send(TRAJECTORIES_COMPLETED.of(run), key=task.encode(),
                              value=CODEC.encode(trajectory))  # fmt: skip
                sent += 1
        producer.flush()
    finally:
        producer.close()
    return sent


class Versions:
    """policy.versions of the run, read as it grows."""

    def __init__(self, bootstrap: str, run: str) -> None:
        self.bootstrap, self.run = bootstrap, run
        self.seen: list[PolicyPublished] = []

    def wait_for(self, count: int, consumer: object, process: LearnerProcess) -> None:
        give_up = time.monotonic() + DEADLINE_S
        while len(self.seen) < count and time.monotonic() < give_up:
            for records in consumer.poll(timeout_ms=200).values():  # type: ignore[attr-defined]
                self.seen += [CODEC.decode_as(r.value, PolicyPublished) for r in records]
        assert len(self.seen) >= count, (
            f"{len(self.seen)} of {count} versions; log:\n" + process.log.read_text()[-4000:]
        )


def test_a_learner_killed_mid_run_trains_every_trajectory_exactly_once(
    learner: tuple[str, LearnerProcess], kafka_bootstrap: str, tmp_path: Path
) -> None:
    run, process = learner
    versions = Versions(kafka_bootstrap, run)
    with reading(kafka_bootstrap, run, "policy.versions") as consumer:
        sent = produce_groups(kafka_bootstrap, run, 0, 6)
        process.start()
        versions.wait_for(2, consumer, process)
        process.kill()  # somewhere in groups 3..6: training, checkpointing or announcing
        sent += produce_groups(kafka_bootstrap, run, 6, 6)
        process.start()
        versions.wait_for(len(versions.seen) + 3, consumer, process)
        process.kill()
        sent += produce_groups(kafka_bootstrap, run, 12, GROUPS - 12)
        process.start()
        versions.wait_for(GROUPS, consumer, process)
        process.stop()
        # Nothing more arrives after a clean stop: no version announced twice, none beyond the groups.
        for records in consumer.poll(timeout_ms=2000).values():
            versions.seen += [CODEC.decode_as(r.value, PolicyPublished) for r in records]

    published = versions.seen
    assert [p.version for p in published] == list(range(1, GROUPS + 1))
    assert all(p.base_version == p.version - 1 and p.run_id == run for p in published)
    assert sum(p.trajectories for p in published) == sent == GROUPS * GROUP_SIZE
    store = LocalObjectStore(tmp_path / "objects")
    assert all(store.contains(p.weights.sha256) for p in published)
    assert len({p.weights.sha256 for p in published}) == GROUPS  # each version its own weights

    saved = checkpoint.load(tmp_path / "ckpt")
    assert saved is not None
    counters = saved.planner.counters
    assert saved.version == GROUPS
    assert (counters.trained, counters.steps) == (sent, GROUPS)
    assert counters.duplicate == counters.stale == counters.late == counters.unreadable == 0
    assert saved.planner.waiting == 0
    assert sum(saved.planner.offsets.values()) == sent  # every record of every partition consumed
    assert process.log.read_text().count("resumed at version") == 2
