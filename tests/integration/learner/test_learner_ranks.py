"""`trialog worker learner --nproc 2` on real Kafka with gloo: rank 1 SIGKILLed mid-run, then rank 0 of the
restarted group. Every trajectory is trained exactly once, versions run 1, 2, 3, ... without a gap or a
repeat, the checkpoint holds both ranks' (agreeing) states, and the weights are those a one-process
learner reaches on the same trajectories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from learner import checkpoint, testing
from learner.kafka_io import Polled, inputs
from learner.learner import Learner, LearnerSettings
from learner.lora import Adaptation, trainable_state
from learner.model import load_model
from learner.publish import MemoryAnnouncer
from learner.samples import BytesPromptEncoder
from learner.state import PlannerConfig, Position
from ops.paths import REPO_ROOT
from schemas.blobs import MemoryObjectStore
from schemas.codec import default_codec
from schemas.origin import FixedClock, Origin
from schemas.publications import PolicyPublished
from schemas.topics import TRAJECTORIES_COMPLETED
from tests.integration.actors.kafka_helpers import new_run, reading

CODEC = default_codec()
GROUPS, GROUP_SIZE = 12, 2
DEADLINE_S = 240.0  # a guard against a hang, not a measure: three groups start on a loaded machine
LR = 1e-3


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    testing.tiny_llama().save_pretrained(folder)
    return folder


class Group:
    """The supervisor (`--nproc 2`) and its ranks, found by their RANK among its children."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ))  # fmt: skip

    def rank_pid(self, rank: int) -> int:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                if ppid != self.process.pid:
                    continue
                env = (stat.parent / "environ").read_bytes().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            if f"RANK={rank}".encode() in env:
                return int(stat.parent.name)
        raise AssertionError(f"no rank {rank} under the supervisor; log:\n{self.log.read_text()[-4000:]}")

    def kill_rank(self, rank: int) -> None:
        os.kill(self.rank_pid(rank), signal.SIGKILL)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=30)


@pytest.fixture
def group(tmp_path: Path, tiny_model_dir: Path, kafka_bootstrap: str) -> Iterator[tuple[str, Group]]:
    run = new_run(kafka_bootstrap, "learnerranks")
    argv = [sys.executable, "-m", "ops.cli", "worker", "learner", "--run", run,
            "--bootstrap", kafka_bootstrap, "--model", str(tiny_model_dir),
            "--group-size", str(GROUP_SIZE), "--max-staleness", "1000",
            "--groups-per-step", "1",  # one version per group: the kills fall between known versions
            "--lora-rank", "0",  # every weight trained: the one-process replay starts from the same model
            "--lr", str(LR), "--threads", "1", "--prompt-encoder", "bytes",
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--objects", str(tmp_path / "objects"),
            "--nproc", "2", "--backend", "gloo"]  # fmt: skip
    started = Group(argv, tmp_path / "learner.log")
    yield run, started
    started.stop()


def produce_groups(bootstrap: str, run: str, first: int, count: int) -> int:
    """`count` groups of two trajectories (rewards 1 and 0), all under one key: one partition, so the
    order of the versions is the order of the groups, for the learner and for its replay."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for g in range(first, first + count):
            for trajectory in testing.group(f"{run}/g{g:04d}", [1.0, 0.0], run_id=run, task_id="task-0"):
                producer.send(TRAJECTORIES_COMPLETED.of(run), key=b"task-0", value=CODEC.encode(trajectory))
        producer.flush()
    finally:
        producer.close()
    return count * GROUP_SIZE


def wait_for_versions(seen: list[PolicyPublished], count: int, consumer: Any, group: Group) -> None:
    give_up = time.monotonic() + DEADLINE_S
    while len(seen) < count and time.monotonic() < give_up:
        for records in consumer.poll(timeout_ms=200).values():
            seen += [CODEC.decode_as(r.value, PolicyPublished) for r in records]
    assert len(seen) >= count, f"{len(seen)} of {count} versions; log:\n" + group.log.read_text()[-4000:]


def replayed(bootstrap: str, run: str, model_dir: Path, tmp_path: Path) -> dict[str, torch.Tensor]:
    """The weights a one-process learner with the same settings reaches on the topic's records."""
    topic = TRAJECTORIES_COMPLETED.of(run)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        polled: list[Polled] = []
        while len(polled) < sum(end.values()):
            for records in consumer.poll(timeout_ms=500).values():
                polled += [Polled(Position(r.topic, r.partition, r.offset), r.value) for r in records]
    finally:
        consumer.close()
    settings = LearnerSettings(
        run_id=run, checkpoint_dir=tmp_path / "replay",
        planner=PlannerConfig(GROUP_SIZE, 120.0, 1000, 1), adaptation=Adaptation(0), lr=LR,
    )  # fmt: skip
    learner = Learner(load_model(model_dir), BytesPromptEncoder(), MemoryObjectStore(), MemoryAnnouncer(),
                      settings, Origin.system("learner", "replay"))  # fmt: skip
    for event in inputs(sorted(polled, key=lambda p: (p.position.partition, p.position.offset)), CODEC,
                        FixedClock()):  # fmt: skip
        learner.offer(event)
    learner.train_ready()
    assert learner.state.version == GROUPS
    return trainable_state(learner.model)


def test_a_learner_of_two_ranks_survives_the_kill_of_either_rank(
    group: tuple[str, Group], kafka_bootstrap: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    run, ranks = group
    seen: list[PolicyPublished] = []
    with reading(kafka_bootstrap, run, "policy.versions") as consumer:
        sent = produce_groups(kafka_bootstrap, run, 0, 4)
        wait_for_versions(seen, 2, consumer, ranks)
        ranks.kill_rank(1)  # somewhere in groups 3..4 (training, checkpointing, announcing) or after them
        sent += produce_groups(kafka_bootstrap, run, 4, 4)
        # Versions 5 and 6 need the groups produced after the kill: the restarted group made them.
        wait_for_versions(seen, 6, consumer, ranks)
        ranks.kill_rank(0)
        sent += produce_groups(kafka_bootstrap, run, 8, GROUPS - 8)
        wait_for_versions(seen, GROUPS, consumer, ranks)
        assert ranks.stop() == 0  # a clean stop: rank 0 checkpoints and releases rank 1
        # Nothing more arrives after a clean stop: no version announced twice, none beyond the groups.
        for records in consumer.poll(timeout_ms=2000).values():
            seen += [CODEC.decode_as(r.value, PolicyPublished) for r in records]

    assert [p.version for p in seen] == list(range(1, GROUPS + 1))
    assert all(p.base_version == p.version - 1 and p.run_id == run for p in seen)
    assert sum(p.trajectories for p in seen) == sent == GROUPS * GROUP_SIZE
    log = ranks.log.read_text()
    assert log.count("restarting from the last checkpoint") == 2, log[-4000:]
    assert log.count("resumed at version") == 2

    saved = checkpoint.load(tmp_path / "ckpt")
    assert saved is not None and saved.version == GROUPS
    counters = saved.planner.counters
    assert (counters.trained, counters.steps) == (sent, GROUPS)
    assert counters.duplicate == counters.stale == counters.late == counters.unreadable == 0
    assert saved.planner.waiting == 0
    assert sum(saved.planner.offsets.values()) == sent
    # every rank's state, and they agree
    assert [s.rank for s in saved.ranks] == [0, 1]
    assert saved.ranks[0].digests == saved.ranks[1].digests

    alone = replayed(kafka_bootstrap, run, tiny_model_dir, tmp_path)
    assert set(alone) == set(saved.trainable)
    for name, tensor in saved.trainable.items():
        torch.testing.assert_close(tensor, alone[name], rtol=1e-4, atol=1e-5)
