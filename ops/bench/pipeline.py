"""`trialog bench pipeline`: the orchestration cost of a step, with the policy and the sandbox taken out.

One streams worker (a real `python -m streams.worker` process on the local stack's Kafka) owns the episodes;
this process plays null rollout, sandbox and verifier workers that answer every request the moment it
arrives (scripted: `run true` for S steps, then submit). Per step we measure the time from sending an
answer to receiving the owner's next request for that episode: Kafka there and back plus the streams
worker's decode, fold, append, acks and table write, i.e. everything that is not the policy or the sandbox.
Throughput: answered requests per second through the one streams worker with E episodes in flight.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from ops.bench.report import cpu_model, memory_gib, write_section
from ops.console import StackError, say
from ops.paths import REPO_ROOT
from ops.topics import TOPICS, ensure_topics, topic_name

TARGETS = {"p50_ms": 20.0, "p99_ms": 100.0, "steps_per_s": 500.0}
UNLOADED_STEPS = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--episodes", type=int, default=60, help="episodes, all in flight at once")
    parser.add_argument("--steps", type=int, default=8, help="run steps per episode before submit")
    parser.add_argument("--bootstrap", help="Kafka (default: the local stack's broker)")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "BENCHMARKS.md")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")


def run(args: argparse.Namespace) -> int:
    from ops.stack.kafka import metadata_error
    from ops.stack.stack import StackConfig

    bootstrap = args.bootstrap or StackConfig.load().kafka.bootstrap
    if metadata_error(bootstrap) is not None:
        raise StackError(f"Kafka does not answer on {bootstrap}", "start the stack: trialog up")
    # Unloaded (one episode: the latency of a step) and loaded (many in flight: throughput), one run each.
    unloaded = _measure(bootstrap, 1, UNLOADED_STEPS)
    loaded = _measure(bootstrap, args.episodes, args.steps)
    section = _render(args, unloaded, loaded)
    print(section)
    if not args.no_write:
        write_section(args.output, section)
        say(f"wrote {args.output}")
    return 0


def _measure(bootstrap: str, episodes: int, steps: int) -> Result:
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, run_id)
    with tempfile.TemporaryDirectory(prefix="trialog-bench-pipeline-") as scratch:
        worker = _start_streams(bootstrap, run_id, Path(scratch))
        try:
            return _drive(bootstrap, run_id, episodes, steps)
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def _start_streams(bootstrap: str, run_id: str, scratch: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "streams.worker", "--run", run_id, "--bootstrap", bootstrap]
    argv += ["--data-dir", str(scratch / "streams"), "--instance", "bench-streams"]
    log = (scratch / "streams.log").open("wb")
    return subprocess.Popen(argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))


@dataclasses.dataclass
class Result:
    overheads_ms: list[float]
    steps: int
    seconds: float
    episodes_done: int


def _drive(bootstrap: str, run_id: str, episodes: int, steps: int) -> Result:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    from ops.bench.pipeline_workers import NullWorkers, start_commands, task_record
    from schemas.codec import default_codec
    from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest

    codec = default_codec()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    # A short fetch wait: the default (500 ms) would be measured as orchestration time.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=5)
    partitions = {spec.name: spec.partitions for spec in TOPICS}
    bases = ("policy.requests", "sandbox.requests", "verify.requests", "trajectories.completed")
    consumer.assign([TopicPartition(topic_name(run_id, b), p) for b in bases for p in range(partitions[b])])
    consumer.seek_to_beginning()
    workers = NullWorkers(steps)
    producer.send(topic_name(run_id, "tasks"), key=b"bench-task", value=codec.encode(task_record()))
    producer.flush()
    sent_at: dict[str, float] = {}
    overheads: list[float] = []
    answered = done = 0
    started = time.monotonic()
    for command in start_commands(run_id, episodes, steps):
        producer.send(topic_name(run_id, "episode.commands"), key=command.episode_id.encode(),
                      value=codec.encode(command))  # fmt: skip
    producer.flush()
    deadline = started + 300
    while done < episodes and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=100).items():
            base = tp.topic[len(run_id) + 1 :]
            for record in records:
                now = time.monotonic()
                if base == "trajectories.completed":
                    done += 1
                    continue
                request = codec.decode(record.value)
                if not isinstance(request, PolicyRequest | SandboxRequest | VerifyRequest):
                    continue
                episode = request.meta.episode_id
                if episode in sent_at:
                    overheads.append((now - sent_at.pop(episode)) * 1000)
                answer_base, answer = workers.answer(request)
                producer.send(
                    topic_name(run_id, answer_base), key=episode.encode(), value=codec.encode(answer)
                )
                sent_at[episode] = time.monotonic()
                answered += 1
        producer.flush()
    seconds = time.monotonic() - started
    producer.close()
    consumer.close()
    if done < episodes:
        raise StackError(f"only {done} of {episodes} episodes completed within 300 s")
    return Result(overheads, answered, seconds, done)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _render(args: argparse.Namespace, unloaded: Result, loaded: Result) -> str:
    rows = []
    for name, result in (("one episode (unloaded)", unloaded), (f"{args.episodes} in flight", loaded)):
        p50, p99 = _percentile(result.overheads_ms, 0.5), _percentile(result.overheads_ms, 0.99)
        rate = result.steps / result.seconds
        rows.append((name, p50, p99, rate, len(result.overheads_ms)))

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    (_, p50_u, p99_u, _, _), (_, p50_l, p99_l, rate_l, _) = rows
    return "\n".join(
        [
            "## pipeline",
            "",
            f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB; one streams worker, "
            "the null workers and the Kafka broker on the same machine",
            f"- command: `trialog bench pipeline --episodes {args.episodes} --steps {args.steps}`",
            f"- unloaded: 1 episode of {UNLOADED_STEPS} run steps; loaded: {args.episodes} episodes of "
            f"{args.steps} run steps, all in flight at once; each ends with submit and verification; null "
            "workers answer at once",
            "",
            "| load | overhead per step p50 | p99 | steps/s through one streams worker | steps measured |",
            "| --- | ---: | ---: | ---: | ---: |",
            *(f"| {n} | {a:.1f} ms | {b:.1f} ms | {r:.0f} | {c} |" for n, a, b, r, c in rows),
            "",
            f"- overhead p50: unloaded {p50_u:.1f} ms, loaded {p50_l:.1f} ms "
            f"(target <= {TARGETS['p50_ms']:g} ms: "
            f"unloaded {met(p50_u <= TARGETS['p50_ms'])}, loaded {met(p50_l <= TARGETS['p50_ms'])})",
            f"- overhead p99: unloaded {p99_u:.1f} ms, loaded {p99_l:.1f} ms "
            f"(target <= {TARGETS['p99_ms']:g} ms: "
            f"unloaded {met(p99_u <= TARGETS['p99_ms'])}, loaded {met(p99_l <= TARGETS['p99_ms'])})",
            f"- {rate_l:.0f} steps/s loaded (target >= {TARGETS['steps_per_s']:g}: "
            f"{met(rate_l >= TARGETS['steps_per_s'])})",
            "- why: the worker handles one input at a time and waits for the acks of its appends before the "
            "next (the table write must follow them); batching inputs per poll, one flush per batch, is the "
            "next step",
            "",
        ]
    )
