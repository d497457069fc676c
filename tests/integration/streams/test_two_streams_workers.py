"""Two streams workers with standby replicas share a run under load; one is killed with SIGKILL mid-run.

Each worker has its own data directory and `--standby-replicas 1`. This test plays null rollout, sandbox
and verifier workers (`ops.bench.pipeline_workers`: every request answered at once) for 40 episodes of 6
steps, all in flight; once a third of the answers are given it kills one streams worker. Its partitions
move to the survivor (session timeout, rebalance, table recovery from the standby copy or the changelog,
then the worker's own recovery from `episode.events`). Every episode must end, and `trialog audit` must
report lost 0, duplicate steps 0 and intact chains. The recovery time (from the kill to the next request
of the slowest episode that was waiting) is printed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from ops.bench.pipeline_workers import NullWorkers, start_commands, task_record
from ops.paths import REPO_ROOT
from schemas.codec import default_codec
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.topics import EPISODE_COMMANDS, TASKS, TOPICS, topic_name
from streams.kafka.topics import ensure_topics
from tests.integration.fault_helpers import audited_healthy

EPISODES, STEPS = 40, 6
RUN_TIMEOUT_S = 240
CODEC = default_codec()
PARTITIONS = {spec.name: spec.partitions for spec in TOPICS}


def _start_worker(bootstrap: str, run: str, name: str, folder: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "ops.cli", "worker", "streams", "--bootstrap", bootstrap, "--run", run,
        "--data-dir", str(folder / f"data-{name}"), "--instance", name, "--standby-replicas", "1",
    ]  # fmt: skip
    with (folder / f"{name}.log").open("ab") as out:
        return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)


def _wait_for(what: str, check: object, timeout_s: float, logs: Path) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < give_up, f"no {what} within {timeout_s:g} s\n{_tails(logs)}"
        time.sleep(0.3)


def _tails(folder: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in sorted(folder.glob("*.log"))
    )


def _recovered_partitions(log: Path) -> int:
    return log.read_text(errors="replace").count("recovered:") if log.exists() else 0


def test_two_streams_workers_survive_a_kill_with_nothing_lost(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = f"it2w{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=0)
    producer.send(TASKS.of(run), key=b"bench-task", value=CODEC.encode(task_record()))
    producer.flush()
    workers = {name: _start_worker(kafka_bootstrap, run, name, tmp_path) for name in ("s1", "s2")}
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50
    )
    bases = ("policy.requests", "sandbox.requests", "verify.requests", "trajectories.completed",
             "trajectories.failed")  # fmt: skip
    consumer.assign([TopicPartition(topic_name(run, b), p) for b in bases for p in range(PARTITIONS[b])])
    consumer.seek_to_beginning()
    try:
        # Both workers own partitions before the load starts (each logs a line per partition it recovers).
        _wait_for(
            "assignment to both workers",
            lambda: all(_recovered_partitions(tmp_path / f"{n}.log") > 0 for n in workers)
            and sum(_recovered_partitions(tmp_path / f"{n}.log") for n in workers) >= PARTITIONS[
                "episode.commands"],
            120,
            tmp_path,
        )  # fmt: skip
        null = NullWorkers(STEPS)
        for command in start_commands(run, EPISODES, STEPS):
            producer.send(EPISODE_COMMANDS.of(run), key=command.episode_id.encode(),
                          value=CODEC.encode(command))  # fmt: skip
        producer.flush()
        ended: set[str] = set()
        answered = 0
        killed_at: float | None = None
        waiting_at_kill: set[str] = set()
        recovered_after: dict[str, float] = {}
        last_request: dict[str, float] = {}
        give_up = time.monotonic() + RUN_TIMEOUT_S
        while len(ended) < EPISODES:
            assert time.monotonic() < give_up, f"{len(ended)} of {EPISODES} ended\n{_tails(tmp_path)}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                base = tp.topic[len(run) + 1 :]
                for record in records:
                    value = CODEC.decode(record.value)
                    if base.startswith("trajectories."):
                        ended.add(value.meta.episode_id)  # type: ignore[attr-defined]
                        continue
                    if not isinstance(value, PolicyRequest | SandboxRequest | VerifyRequest):
                        continue
                    episode = value.meta.episode_id
                    now = time.monotonic()
                    last_request[episode] = now
                    if killed_at is not None and episode in waiting_at_kill:
                        recovered_after.setdefault(episode, now - killed_at)
                    answer_topic, answer = null.answer(value)
                    producer.send(answer_topic.of(run), key=episode.encode(), value=CODEC.encode(answer))
                    answered += 1
            producer.flush()
            if killed_at is None and answered >= EPISODES * (2 * STEPS + 2) // 3:
                victim = workers["s1"]
                assert victim.poll() is None, _tails(tmp_path)
                os.kill(victim.pid, signal.SIGKILL)
                victim.wait(timeout=30)
                killed_at = time.monotonic()
                waiting_at_kill = set(last_request) - ended
        assert killed_at is not None, "the load ended before the kill"
        assert workers["s2"].poll() is None, _tails(tmp_path)
        slowest = max(recovered_after.values(), default=0.0)
        print(f"\nrecovery after kill -9: slowest waiting episode resumed {slowest:.1f} s after the kill "
              f"({len(recovered_after)} of {len(waiting_at_kill)} waiting episodes seen again)")  # fmt: skip
        (tmp_path / "recovery.json").write_text(json.dumps({"slowest_s": slowest}))
        report = audited_healthy(run, kafka_bootstrap, timeout_s=180)
        assert report["started"] == EPISODES and report["completed"] == EPISODES, report
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.terminate()
        for process in workers.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        producer.close()
        consumer.close()
