"""A whole run on real Kafka and real Docker sandboxes: `trialog run start --spawn`, then `run status`.

Two example tasks, four episodes, the scripted policy (each task's solution.patch, then submit): the run
command publishes the tasks, spawns one streams, sandbox, rollout and verifier worker as subprocesses,
schedules the episodes and stops the workers. Every episode must end completed with reward 1.0, and
`run status --json` must say so. Every process shares one object store (`$TRIALOG_HOME/objects`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
from kafka import KafkaProducer

from actors.tasks.publish import publish_tasks
from ops.paths import REPO_ROOT, Paths
from ops.stack.images import sandbox_ref
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.commands import StartEpisode
from schemas.common import FailureClass, Verdict
from schemas.topics import DEADLETTER, EPISODE_COMMANDS, topic_name
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.kafka.reader import read_to_end
from streams.kafka.topics import ensure_topics
from tests.unit.actors.requests import request_meta

TASKS = REPO_ROOT / "examples" / "tasks"
EXAMPLES = (TASKS / "easy-fix-add", TASKS / "easy-fix-range")
EPISODES = 4
RUN_TIMEOUT_S = 240


def _run_cli(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", "run", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _logs(home: Path) -> str:
    parts = []
    for log in sorted(home.glob("runs/*/logs/*.log")):
        parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
    return "\n".join(parts)


def test_a_scripted_run_completes_every_episode_with_reward_one(
    kafka_bootstrap: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    run = f"e2e{uuid.uuid4().hex[:8]}"
    home = tmp_path / "home"
    # DOCKER_HOST points at the stack's engine (the docker_client fixture set it); the workers inherit it.
    env = {**os.environ, "TRIALOG_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    result = _run_cli(
        env,
        "start", "--tasks", *map(str, EXAMPLES), "--episodes", str(EPISODES), "--policy", "scripted",
        "--run", run, "--spawn", "--bootstrap", kafka_bootstrap, "--capacity", "4",
        timeout=RUN_TIMEOUT_S,
    )  # fmt: skip
    took = time.monotonic() - started
    assert result.returncode == 0, f"{result.stderr}\n{_logs(home)}"
    assert f"ended {EPISODES}/{EPISODES} (completed {EPISODES}, failed 0)" in result.stderr, result.stderr
    print(f"run start --spawn: {took:.1f} s\n{result.stderr}")

    records = list(
        read_to_end(
            kafka_bootstrap,
            [
                topic_name(run, b)
                for b in ("episode.commands", "trajectories.completed", "trajectories.failed")
            ],
        )
    )
    commands = [v for _t, v in records if isinstance(v, StartEpisode)]
    completed = {v.meta.episode_id: v for _t, v in records if isinstance(v, TrajectoryCompleted)}
    failed = [v for _t, v in records if isinstance(v, TrajectoryFailed)]
    assert len(commands) == EPISODES and failed == []
    assert set(completed) == {c.episode_id for c in commands}
    assert all(t.reward == 1.0 and t.verdict.value == "pass" for t in completed.values())
    assert {t.meta.task_id for t in completed.values()} <= {"easy-fix-add", "easy-fix-range"}
    assert all(len(t.steps) == 2 for t in completed.values())  # apply the patch, then submit
    letters = [v for _t, v in read_to_end(kafka_bootstrap, [DEADLETTER.of(run)])]
    print(f"dead letters: {len(letters)} {[getattr(v, 'reason', '?') for v in letters]}")

    status = _run_cli(env, "status", run, "--json", "--bootstrap", kafka_bootstrap, timeout=60)
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["started"] == EPISODES and summary["completed"] == EPISODES
    assert summary["failed"] == 0 and summary["failed_by_class"] == {} and summary["in_flight"] == 0
    assert summary["mean_reward"] == 1.0 and summary["verdicts"] == {"pass": EPISODES}

    # Again (validating the task first, in a sandbox): the scheduler reads the log back, starts nothing more.
    again = _run_cli(
        env, "start", "--tasks", str(EXAMPLES[0]), "--episodes", str(EPISODES), "--policy", "scripted",
        "--run", run, "--bootstrap", kafka_bootstrap, "--validate", timeout=120,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    # The validation's verdict table goes to stderr too (stdout is kept for a command's --json document).
    assert "valid" in again.stderr and f"started {EPISODES}/{EPISODES}" in again.stderr, again.stderr
    recount = read_to_end(kafka_bootstrap, [EPISODE_COMMANDS.of(run)])
    assert sum(isinstance(v, StartEpisode) for _t, v in recount) == EPISODES


def _commands(bootstrap: str, run: str) -> list[StartEpisode]:
    found = read_to_end(bootstrap, [EPISODE_COMMANDS.of(run)])
    return [v for _t, v in found if isinstance(v, StartEpisode)]


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < give_up, f"no {what} within {timeout_s} s"
        time.sleep(0.2)


def _end(bootstrap: str, command: StartEpisode, failed: bool = False) -> None:
    meta = dataclasses.replace(request_meta(episode=command.episode_id), run_id=command.run_id)
    trajectory: TrajectoryCompleted | TrajectoryFailed
    if failed:
        base, trajectory = "trajectories.failed", TrajectoryFailed(meta, FailureClass.STEP_LIMIT, "long", ())
    else:
        base = "trajectories.completed"
        trajectory = TrajectoryCompleted(meta, command.group_id, "Fix.", (), 1.0, Verdict.PASS, 1, 1, 0, 0)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        producer.send(topic_name(command.run_id, base), key=b"k", value=default_codec().encode(trajectory))
        producer.flush()
    finally:
        producer.close()


def test_the_scheduler_holds_back_at_capacity_and_a_restart_starts_nothing_extra(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """No workers: the test ends the episodes itself (trajectories), so it decides when a slot frees."""
    run = f"sch{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    paths = Paths(tmp_path / "home", tmp_path / "cache")
    publish_tasks(
        [EXAMPLES[0]], kafka_bootstrap, LocalObjectStore(paths.objects), str(sandbox_ref()), run=run
    )
    argv = [
        sys.executable, "-m", "ops.cli", "worker", "scheduler", "--run", run, "--episodes", "3",
        "--capacity", "2", "--group-size", "2", "--bootstrap", kafka_bootstrap,
    ]  # fmt: skip
    log = tmp_path / "scheduler.log"

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)

    first = start()
    try:
        _wait_for("2 StartEpisode", lambda: len(_commands(kafka_bootstrap, run)) == 2)
        time.sleep(2.0)  # backpressure: the pipeline is full, nothing more starts
        assert len(_commands(kafka_bootstrap, run)) == 2 and first.poll() is None
    finally:
        first.kill()
        first.wait(timeout=30)
    second = start()
    try:
        _wait_for("the read-back", lambda: "(read back" in log.read_text())
        time.sleep(1.0)
        before = _commands(kafka_bootstrap, run)
        assert len(before) == 2 and before[0].group_id == before[1].group_id  # one group of 2
        _end(kafka_bootstrap, before[0])
        _wait_for("a third StartEpisode", lambda: len(_commands(kafka_bootstrap, run)) == 3)
        (third,) = [c for c in _commands(kafka_bootstrap, run) if c not in before]  # read in partition order
        assert third.group_id != before[0].group_id and third.task_id == "easy-fix-add"
        _end(kafka_bootstrap, before[1], failed=True)
        assert second.poll() is None  # 2 of 3 ended
        _end(kafka_bootstrap, third)
        assert second.wait(timeout=30) == 0, log.read_text()
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(timeout=30)
    assert len(_commands(kafka_bootstrap, run)) == 3
    assert "ended 3/3 (completed 2, failed 1), in flight 0/2: done" in log.read_text()
