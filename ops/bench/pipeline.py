"""`trialog bench pipeline`: the orchestration cost of a step, with the policy and the sandbox taken out.

One streams worker (a real `trialog worker streams` process on the local stack's Kafka) owns the episodes;
this process plays null rollout, sandbox and verifier workers that answer every request the moment it
arrives (scripted: `run true` for S steps, then submit). Per step we measure the time from sending an
answer to receiving the owner's next request for that episode: Kafka there and back plus the streams
worker's decode, fold, append, acks and table write, i.e. everything that is not the policy or the sandbox.
Throughput: answered requests per second through the one streams worker with E episodes in flight, for
each E of `--episodes` (a load sweep: the loop is closed, so with few episodes in flight the rate is
bounded by the round trip and not by the worker; the worker's capacity is the rate where it levels off).
Under load a step's latency is queueing (Little's law: E / steps per second), so the orchestration
overhead per step is the unloaded measurement (one episode). CPU: the streams worker's user+system time
(from /proc) divided by the steps it handled.

`--baseline DIR` runs the same measurements with the streams worker of another checkout (e.g. a
`git worktree` of the commit before a change) in the same invocation, alternating with this checkout's,
so both see the same machine load. `--profile DIR` writes a cProfile of each streams worker there.
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
from typing import Any

from ops.bench.report import cpu_model, memory_gib, write_section
from ops.cli import kit
from ops.console import say
from ops.paths import REPO_ROOT
from schemas.topics import (
    EPISODE_COMMANDS,
    POLICY_REQUESTS,
    SANDBOX_REQUESTS,
    TASKS,
    TRAJECTORIES_COMPLETED,
    VERIFY_REQUESTS,
)
from streams.errors import StackError
from streams.kafka.topics import ensure_topics
from streams.profiling import PROFILE_ENV

TARGETS = {"p50_ms": 20.0, "p99_ms": 100.0, "steps_per_s": 500.0}
UNLOADED_STEPS = 30


def _loads(text: str) -> list[int]:
    try:
        loads = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        loads = []
    if not loads or min(loads) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give episode counts >= 1, comma-separated, e.g. 60,200")
    return sorted(set(loads))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--episodes",
        type=_loads,
        default="60,200,400",
        metavar="N[,N...]",
        help="episodes all in flight at once: one measurement per count, comma-separated",
    )
    parser.add_argument(
        "--steps", type=kit.positive_int, metavar="N", default=8, help="run steps per episode before submit"
    )
    kit.add_bootstrap(parser)
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "pipeline")
    parser.add_argument(
        "--baseline", type=kit.existing_dir, metavar="DIR",
        help="also measure the streams worker of this checkout",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=kit.positive_int, metavar="N", default=1, help="alternating rounds (with --baseline)"
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="write a cProfile of each streams worker into this folder"
    )


@dataclasses.dataclass
class Result:
    overheads_ms: list[float]
    steps: int
    seconds: float
    episodes_done: int
    cpu_s: float  # the streams worker's user + system CPU time while driving
    driver_cpu_s: float = 0.0  # this process's (the null workers'), same span


@dataclasses.dataclass
class Measures:
    """Every measurement of one streams worker code base (this checkout, or the baseline)."""

    unloaded: list[Result] = dataclasses.field(default_factory=list)
    loaded: dict[int, list[Result]] = dataclasses.field(default_factory=dict)  # episodes in flight -> ...


def run(args: argparse.Namespace) -> int:
    from ops.stack.kafka import metadata_error
    from ops.stack.stack import StackConfig

    bootstrap = args.bootstrap or StackConfig.load().kafka.bootstrap
    if metadata_error(bootstrap) is not None:
        raise StackError(f"Kafka does not answer on {bootstrap}", "start the stack: trialog up")
    checkouts: dict[str, Path] = {"this checkout": REPO_ROOT}
    if args.baseline is not None:
        checkouts = {"baseline": args.baseline.resolve(), **checkouts}
    measures = {name: Measures() for name in checkouts}
    for round_ in range(max(1, args.rounds)):
        # Unloaded (one episode: the latency of a step) and loaded (many in flight: throughput).
        for name, root in checkouts.items():
            profile = _profile_path(args.profile, name, round_, "unloaded")
            measures[name].unloaded.append(_measure(bootstrap, root, 1, UNLOADED_STEPS, profile))
        for episodes in args.episodes:
            for name, root in checkouts.items():
                profile = _profile_path(args.profile, name, round_, f"loaded-{episodes}")
                result = _measure(bootstrap, root, episodes, args.steps, profile)
                measures[name].loaded.setdefault(episodes, []).append(result)
                say(f"{name}, {episodes} in flight: {result.steps / result.seconds:.0f} steps/s")
    section = _render(args, measures, checkouts)
    print(section)
    if not args.no_record:
        write_section(args.record, section)
        say(f"wrote {args.record}")
    return 0


def _profile_path(folder: Path | None, name: str, round_: int, load: str) -> Path | None:
    if folder is None:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"streams-{name.replace(' ', '-')}-{load}-{round_}.prof"


def _measure(bootstrap: str, root: Path, episodes: int, steps: int, profile: Path | None) -> Result:
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, run_id)
    with tempfile.TemporaryDirectory(prefix="trialog-bench-pipeline-") as scratch:
        worker = _start_streams(bootstrap, run_id, Path(scratch), root, profile)
        try:
            return _drive(bootstrap, run_id, episodes, steps, worker.pid)
        except StackError as exc:
            tail = (Path(scratch) / "streams.log").read_text(errors="replace")[-3000:]
            raise StackError(f"{exc.args[0]}; the streams worker's log ends:\n{tail}") from exc
        finally:
            worker.terminate()
            worker.wait(timeout=60)


def _start_streams(
    bootstrap: str, run_id: str, scratch: Path, root: Path, profile: Path | None
) -> subprocess.Popen[bytes]:
    # A checkout measured beside this one may predate `ops.cli` as the one entry point.
    entry = (
        ["ops.cli", "worker", "streams"] if (root / "ops/cli/__main__.py").exists() else ["streams.worker"]
    )
    argv = [sys.executable, "-m", *entry, "--run", run_id, "--bootstrap", bootstrap]
    argv += ["--data-dir", str(scratch / "streams"), "--instance", "bench-streams"]
    log = (scratch / "streams.log").open("wb")
    env = {**os.environ, "PYTHONPATH": str(root)}
    if profile is not None:
        env[PROFILE_ENV] = str(profile)
    return subprocess.Popen(argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, env=env)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _drive(bootstrap: str, run_id: str, episodes: int, steps: int, streams_pid: int) -> Result:
    from kafka import TopicPartition

    from ops.bench.pipeline_workers import NullWorkers, start_commands, task_record
    from schemas.codec import default_codec
    from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
    from streams.kafka import clients

    codec = default_codec()
    producer = clients.producer(bootstrap, linger_ms=0)
    # A short fetch wait: the default (500 ms) would be measured as orchestration time.
    consumer = clients.consumer(bootstrap, enable_auto_commit=False, fetch_max_wait_ms=5)
    read = (POLICY_REQUESTS, SANDBOX_REQUESTS, VERIFY_REQUESTS, TRAJECTORIES_COMPLETED)
    consumer.assign([TopicPartition(topic.of(run_id), p) for topic in read for p in range(topic.partitions)])
    consumer.seek_to_beginning()
    workers = NullWorkers(steps)
    producer.send(TASKS.of(run_id), key=b"bench-task", value=codec.encode(task_record()))
    producer.flush()
    _warm_up(producer, consumer, run_id, workers, steps)
    sent_at: dict[str, float] = {}
    overheads: list[float] = []
    answered = done = 0
    started = time.monotonic()
    cpu_before, driver_before = cpu_seconds(streams_pid), time.process_time()
    for command in start_commands(run_id, episodes, steps):
        producer.send(EPISODE_COMMANDS.of(run_id), key=command.episode_id.encode(),
                      value=codec.encode(command))  # fmt: skip
    producer.flush()
    deadline = started + 300
    while done < episodes and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=100).items():
            for record in records:
                now = time.monotonic()
                if tp.topic == TRAJECTORIES_COMPLETED.of(run_id):
                    done += 1
                    continue
                request = codec.decode(record.value)
                if not isinstance(request, PolicyRequest | SandboxRequest | VerifyRequest):
                    continue
                episode = request.meta.episode_id
                if WARM_UP in episode:
                    continue
                if episode in sent_at:
                    overheads.append((now - sent_at.pop(episode)) * 1000)
                answer_topic, answer = workers.answer(request)
                producer.send(answer_topic.of(run_id), key=episode.encode(), value=codec.encode(answer))
                sent_at[episode] = time.monotonic()
                answered += 1
        producer.flush()
    seconds = time.monotonic() - started
    cpu, driver_cpu = cpu_seconds(streams_pid) - cpu_before, time.process_time() - driver_before
    producer.close()
    consumer.close()
    if done < episodes:
        raise StackError(f"only {done} of {episodes} episodes completed within 300 s")
    return Result(overheads, answered, seconds, done, cpu, driver_cpu)


WARM_UP = "-warm-up-"


def _warm_up(producer: Any, consumer: Any, run_id: str, workers: Any, steps: int) -> None:
    """Run one episode end to end before measuring, so that the streams worker's start (metadata of new
    topics, table recovery) is not measured. A start the worker could not handle yet (it dead-letters it)
    is tried again with a new episode every 20 s; the consumer is left after the warm-up's trajectory."""
    import dataclasses as dc

    from ops.bench.pipeline_workers import start_commands
    from schemas.codec import default_codec
    from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
    from schemas.trajectories import TrajectoryCompleted

    codec = default_codec()
    give_up = time.monotonic() + 240
    for attempt in range(12):
        (command,) = start_commands(run_id, 1, steps)
        episode = f"{run_id}{WARM_UP}{attempt}"
        command = dc.replace(command, episode_id=episode, meta=dc.replace(command.meta, event_id=episode))
        producer.send(EPISODE_COMMANDS.of(run_id), key=episode.encode(), value=codec.encode(command))
        producer.flush()
        retry_at = time.monotonic() + 20
        while time.monotonic() < min(retry_at, give_up):
            for records in consumer.poll(timeout_ms=100).values():
                for record in records:
                    value = codec.decode(record.value)
                    if isinstance(value, TrajectoryCompleted) and WARM_UP in value.meta.episode_id:
                        return
                    if isinstance(value, PolicyRequest | SandboxRequest | VerifyRequest):
                        answer_topic, answer = workers.answer(value)
                        key = value.meta.episode_id.encode()
                        producer.send(answer_topic.of(run_id), key=key, value=codec.encode(answer))
            producer.flush()
    raise StackError("the warm-up episode did not complete within 240 s")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(results: list[Result]) -> tuple[float, float, float, float, float, int]:
    """p50 and p99 of every step of every round, steps/s and CPU ms per step (the streams worker's, the
    null workers') over all rounds."""
    overheads = [ms for result in results for ms in result.overheads_ms]
    steps = sum(result.steps for result in results)
    seconds = sum(result.seconds for result in results)
    cpu_ms = 1000 * sum(result.cpu_s for result in results) / max(1, steps)
    driver_ms = 1000 * sum(result.driver_cpu_s for result in results) / max(1, steps)
    p50, p99 = _percentile(overheads, 0.5), _percentile(overheads, 0.99)
    return p50, p99, steps / seconds, cpu_ms, driver_ms, len(overheads)


def _render(args: argparse.Namespace, measures: dict[str, Measures], checkouts: dict[str, Path]) -> str:
    # Each checkout's measurements summarised once: unloaded, then each load (episodes in flight).
    unloaded = {name: _summary(measure.unloaded) for name, measure in measures.items()}
    loads = {name: {n: _summary(r) for n, r in sorted(m.loaded.items())} for name, m in measures.items()}
    rows = []
    for name in measures:
        rows.append((name, "one episode (unloaded)", *unloaded[name]))
        rows += [(name, f"{n} in flight", *summary) for n, summary in loads[name].items()]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    p50_u, p99_u, *_ = unloaded["this checkout"]
    # (episodes in flight, latency p50, steps/s, streams CPU per step) of this checkout
    loaded = [(n, p50, rate, cpu_ms) for n, (p50, _, rate, cpu_ms, _, _) in loads["this checkout"].items()]
    best_n, _, best_rate, best_cpu = max(loaded, key=lambda load: load[2])
    queueing = ", ".join(f"{n} in flight {p50:.0f} ms ({n} / {rate:.0f} steps/s = {1000 * n / rate:.0f} ms)"
                         for n, p50, rate, _ in loaded)  # fmt: skip
    rates = ", ".join(f"{rate:.0f} with {n}" for n, _, rate, _ in loaded)
    episodes = ",".join(str(n) for n in args.episodes)
    command = f"trialog bench pipeline --episodes {episodes} --steps {args.steps}"
    if args.baseline is not None:
        command += f" --baseline {args.baseline} --rounds {args.rounds}"
    lines = [
        "## pipeline",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB; one streams worker, "
        "the null workers and the Kafka broker on the same machine",
        f"- command: `{command}`",
        f"- unloaded: 1 episode of {UNLOADED_STEPS} run steps; loaded: {episodes} episodes of "
        f"{args.steps} run steps, all in flight at once; each ends with submit and verification; null "
        "workers answer at once"
        + (
            f"; {max(1, args.rounds)} round(s), the baseline and this checkout alternating"
            if args.baseline
            else ""
        ),
        *(f"- {name}: `{root}`" for name, root in checkouts.items() if args.baseline is not None),
        "",
        "| streams worker | load | latency per step p50 | p99 | steps/s through one streams worker "
        "| streams CPU per step | null workers' CPU per step | steps measured |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {n} | {load} | {a:.1f} ms | {b:.1f} ms | {r:.0f} | {c:.2f} ms | {d:.2f} ms | {k} |"
            for n, load, a, b, r, c, d, k in rows
        ),
        "",
        f"- orchestration overhead per step (unloaded): p50 {p50_u:.1f} ms (target <= "
        f"{TARGETS['p50_ms']:g} ms: {met(p50_u <= TARGETS['p50_ms'])}), p99 {p99_u:.1f} ms (target <= "
        f"{TARGETS['p99_ms']:g} ms: {met(p99_u <= TARGETS['p99_ms'])})",
        f"- under load a step waits its turn (Little's law, p50 against in flight / rate): {queueing}",
        f"- throughput: {best_rate:.0f} steps/s with {best_n} in flight (target >= "
        f"{TARGETS['steps_per_s']:g}: {met(best_rate >= TARGETS['steps_per_s'])}); {rates}; there the "
        f"streams worker spent {best_cpu:.2f} ms of CPU per step (at most {1000 / max(best_cpu, 1e-9):.0f} "
        "steps/s on one core)",
        "",
    ]
    return "\n".join(lines)
