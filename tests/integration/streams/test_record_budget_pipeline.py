"""A 100-step episode whose every step prints 64 KiB of non-UTF-8 bytes to stdout and to stderr, on the
whole pipeline: real Kafka, real Docker sandboxes, the workers of `trialog run start --spawn` as processes,
the scripted policy (`tests.integration.fault_helpers.Cluster`).

Before the record budget (`schemas.budget`) the episodes row passed Faust's 1 MiB producer limit after about
ten such steps: the streams worker's batch could not be written, and every restart replayed it into the
same raise. Now the episode must complete with a TrajectoryCompleted graded like any other (the script
applies the task's solution after the noise, so the grade is 1.0), with no dead letter, no failed
trajectory, the streams worker alive throughout, and every record on the topics under the budget.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from actors.tasks.publish import publish_tasks
from ops.paths import REPO_ROOT, Paths
from ops.stack.images import sandbox_ref
from schemas.blobs import LocalObjectStore
from schemas.budget import RECORD_BUDGET
from schemas.codec import default_codec
from schemas.events import StepExecuted
from schemas.topics import DEADLETTER, EPISODE_EVENTS, TRAJECTORIES_COMPLETED, TRAJECTORIES_FAILED, topic_name
from schemas.trajectories import TrajectoryCompleted
from streams.kafka.reader import read_records
from streams.kafka.topics import ensure_topics
from tests.integration.fault_helpers import Cluster, wait_for

pytestmark = pytest.mark.integration

TASK = REPO_ROOT / "examples" / "tasks" / "easy-fix-add"
NOISY_STEPS = 100
NOISE = (
    "python3 -c 'import sys; b = bytes(range(128, 256)) * 512; "
    "sys.stdout.buffer.write(b); sys.stdout.flush(); sys.stderr.buffer.write(b)'"
)  # 64 KiB per stream, every byte invalid UTF-8 on its own (U+FFFD, three bytes, once decoded)
RUN_TIMEOUT_S = 480
CODEC = default_codec()


@pytest.fixture
def cluster(
    kafka_bootstrap: str, docker_client: docker.DockerClient, stack_paths: Paths, tmp_path: Path
) -> Iterator[Cluster]:
    run = f"bud{uuid.uuid4().hex[:8]}"
    paths = Paths(tmp_path / "home", stack_paths.cache)
    ensure_topics(kafka_bootstrap, run)
    publish_tasks([TASK], kafka_bootstrap, LocalObjectStore(paths.objects), str(sandbox_ref()), run=run)
    calls = [{"tool": "run", "command": NOISE}] * NOISY_STEPS
    calls += [{"tool": "apply_patch", "diff": (TASK / "solution.patch").read_text()}, {"tool": "submit"}]
    actions = tmp_path / "actions.json"
    actions.write_text(json.dumps({TASK.name: calls}))
    made = Cluster(run, kafka_bootstrap, tmp_path, [TASK], actions, paths)
    try:
        yield made
    finally:
        made.stop()
        if (tmp_path / "logs").exists():
            shutil.copytree(tmp_path / "logs", Path("/tmp") / "trialog-budget-logs" / run, dirs_exist_ok=True)
        for container in docker_client.containers.list(all=True, filters={"label": "dev.trialog.worker"}):
            if container.labels.get("dev.trialog.worker", "").startswith(run):
                container.remove(force=True)


def test_a_hundred_steps_of_64_kib_non_utf8_output_complete_with_a_trajectory(
    cluster: Cluster, kafka_bootstrap: str
) -> None:
    started = time.monotonic()
    for kind in ("streams", "sandbox", "rollout", "verifier"):
        cluster.start(kind)
    scheduler = [
        sys.executable, "-m", "ops.cli", "worker", "scheduler", "--run", cluster.run, "--bootstrap",
        kafka_bootstrap, "--episodes", "1", "--capacity", "1", "--group-size", "1",
        "--max-steps", str(NOISY_STEPS + 2),
    ]  # fmt: skip
    process = cluster.start("scheduler", scheduler)
    wait_for(
        "the scheduler's end",
        lambda: process.poll() is not None or not all(cluster.alive().values()),
        RUN_TIMEOUT_S,
        every_s=1.0,
    )
    assert process.wait(timeout=5) == 0, cluster.tails()
    assert all(cluster.alive().values()), cluster.tails()  # no worker died (a crash loop starts so)
    took = time.monotonic() - started

    def records(base: str) -> list[bytes]:
        return [r.value for r in read_records(kafka_bootstrap, [topic_name(cluster.run, base)]) if r.value]

    assert records(DEADLETTER.name) == [] and records(TRAJECTORIES_FAILED.name) == []
    (completed,) = records(TRAJECTORIES_COMPLETED.name)
    trajectory = CODEC.decode_as(completed, TrajectoryCompleted)
    assert len(trajectory.steps) == NOISY_STEPS + 2 and trajectory.reward == 1.0, trajectory.verdict
    events = records(EPISODE_EVENTS.name)
    noisy = [e for e in map(CODEC.decode, events) if isinstance(e, StepExecuted)]
    assert len(noisy) == NOISY_STEPS + 1
    assert all(e.stdout.total_bytes == e.stderr.total_bytes == 65536 for e in noisy[:NOISY_STEPS])
    assert all(e.stdout.truncated and "\ufffd" in e.stdout.text for e in noisy[:NOISY_STEPS])
    largest = max(len(completed), sum(map(len, events)), *map(len, events))
    assert largest <= RECORD_BUDGET, largest
    log_bytes = sum(map(len, events))
    print(
        f"{NOISY_STEPS + 2} steps in {took:.0f} s; trajectory {len(completed)} B, episode log {log_bytes} B"
    )
