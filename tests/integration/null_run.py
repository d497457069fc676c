"""Drive episodes through a real streams worker with null rollout, sandbox and verifier answers
(`ops.bench.pipeline_workers.NullWorkers`: every request answered at once): for tests about the log itself
(brokers, start order, security), where real sandboxes would only add minutes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kafka import TopicPartition

from ops.bench.pipeline_workers import NullWorkers, start_commands, task_record
from ops.paths import REPO_ROOT
from schemas.codec import default_codec
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.topics import EPISODE_COMMANDS, TASKS, TOPICS, topic_name
from streams.kafka import clients

CODEC = default_codec()
PARTITIONS = {spec.name: spec.partitions for spec in TOPICS}
READ = (
    "policy.requests",
    "sandbox.requests",
    "verify.requests",
    "trajectories.completed",
    "trajectories.failed",
)


def start_streams(
    bootstrap: str, run: str, name: str, folder: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A streams worker of `run` as a process; its log is `folder/NAME.log`, its data `folder/data-NAME`;
    `env`: more environment variables (a fault to inject)."""
    argv = [
        sys.executable, "-m", "ops.cli", "worker", "streams", "--bootstrap", bootstrap, "--run", run,
        "--data-dir", str(folder / f"data-{name}"), "--instance", name, *extra,
    ]  # fmt: skip
    with (folder / f"{name}.log").open("ab") as out:
        return subprocess.Popen(
            argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )


def tails(folder: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for log in sorted(folder.glob("*.log"))
    )


def publish_task(bootstrap: str, run: str) -> None:
    producer = clients.producer(bootstrap, linger_ms=0)
    try:
        producer.send(TASKS.of(run), key=b"bench-task", value=CODEC.encode(task_record())).get(60)
    finally:
        producer.close()


def run_episodes(
    bootstrap: str,
    run: str,
    episodes: int,
    steps: int,
    timeout_s: float,
    folder: Path,
    on_progress: Callable[[int, set[str]], None] | None = None,
    on_request: Callable[[str], None] | None = None,
) -> set[str]:
    """Start `episodes` episodes of `steps` steps, answer every request, return the ids of those that
    ended (completed or failed) once all did. `on_request(episode id)` before each answer;
    `on_progress(answers so far, ids ended so far)` after each poll (where a test injects its fault)."""
    producer = clients.producer(bootstrap, linger_ms=0)
    consumer = clients.consumer(bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50)
    consumer.assign([TopicPartition(topic_name(run, b), p) for b in READ for p in range(PARTITIONS[b])])
    consumer.seek_to_beginning()
    null = NullWorkers(steps)
    try:
        for command in start_commands(run, episodes, steps):
            producer.send(
                EPISODE_COMMANDS.of(run), key=command.episode_id.encode(), value=CODEC.encode(command)
            )
        producer.flush()
        ended: set[str] = set()
        answered = 0
        give_up = time.monotonic() + timeout_s
        while len(ended) < episodes:
            assert time.monotonic() < give_up, (
                f"{len(ended)} of {episodes} ended in {timeout_s:g} s\n{tails(folder)}"
            )
            for tp, records in consumer.poll(timeout_ms=200).items():
                base = tp.topic[len(run) + 1 :]
                for record in records:
                    value = CODEC.decode(record.value)
                    if base.startswith("trajectories."):
                        ended.add(value.meta.episode_id)  # type: ignore[attr-defined]
                        continue
                    if not isinstance(value, PolicyRequest | SandboxRequest | VerifyRequest):
                        continue
                    if on_request is not None:
                        on_request(value.meta.episode_id)
                    topic, answer = null.answer(value)
                    producer.send(
                        topic.of(run), key=value.meta.episode_id.encode(), value=CODEC.encode(answer)
                    )
                    answered += 1
            producer.flush()
            if on_progress is not None:
                on_progress(answered, ended)
        return ended
    finally:
        consumer.close()
        producer.close()
