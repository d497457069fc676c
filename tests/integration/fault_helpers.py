"""Helpers of tests/integration/test_faults.py: a run's worker processes, and the run's log read back.

`Cluster` starts the run's workers as subprocesses with the command lines `trialog run start --spawn` uses
(`ops.run_workers.worker_commands`), kills them with SIGKILL and starts them again; each process writes its
own log file under the test's folder (the kill and restart number is in the name). `LogView` is the run's
log folded into what the fault tests look at: which episodes started and ended, the steps executed, the
requests issued, the answers given.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kafka import KafkaConsumer, TopicPartition

from ops.paths import REPO_ROOT, Paths
from ops.run_workers import WORKER_KINDS, worker_commands
from schemas import topics
from schemas.codec import DecodeError, default_codec
from schemas.events import EpisodeCompleted, EpisodeFailed, EpisodeStarted, StepExecuted
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.topics import topic_name

READ_TOPICS = tuple(
    topic.name
    for topic in (
        topics.EPISODE_EVENTS,
        topics.POLICY_REQUESTS,
        topics.SANDBOX_REQUESTS,
        topics.VERIFY_REQUESTS,
        topics.POLICY_RESULTS,
        topics.SANDBOX_RESULTS,
        topics.VERIFY_RESULTS,
    )
)


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, every_s: float = 0.3) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError(f"no {what} within {timeout_s:g} s")
        time.sleep(every_s)


# After a run's end, how long the test's reader may take to read the log's last events.
READ_UP_S = 60.0


class LogSource(Protocol):
    """What a moment is waited on: the run's log as read so far (`Reader`)."""

    view: LogView

    def poll(self) -> LogView: ...


def wait_for_moment(
    what: str,
    check: Callable[[LogView], bool],
    reader: LogSource,
    *,
    dead: Callable[[], Iterable[str]],
    run_ended: Callable[[], bool],
    tails: Callable[[], str],
    timeout_s: float,
    every_s: float = 0.3,
) -> LogView:
    """Wait until the run's log, as `reader` reads it, passes `check`; fail at once when a worker that
    should run (`dead`) exited, and when the run ended (`run_ended`: the scheduler exited) before it.

    The log is read before the run's end is looked at, and the end counts only `READ_UP_S` after it: the
    run may end while the moment's events are in the log but not yet read (the chaos test's last fault, 10
    episodes before the end, cut a broker off for 8 s, and its scheduler saw the 200th episode end before
    this reader saw the 191st: the test failed a healthy run when it looked at the scheduler first)."""
    run_ended_at: float | None = None

    def ready() -> bool:
        nonlocal run_ended_at
        exited = sorted(dead())
        assert not exited, f"{exited} exited early:\n{tails()}"
        if check(reader.poll()):
            return True
        if not run_ended():
            run_ended_at = None  # (a scheduler killed and started again by the test is running again)
            return False
        run_ended_at = run_ended_at or time.monotonic()
        assert time.monotonic() - run_ended_at < READ_UP_S, (
            f"the run ended before the faults did ({what}; the log read up to {READ_UP_S:g} s after "
            f"its end)\n{tails()}"
        )
        return False

    wait_for(what, ready, timeout_s, every_s)
    return reader.view


@dataclass
class Cluster:
    """The worker subprocesses of one run, started with the command lines of `trialog run start --spawn`
    (`ops.run_workers.worker_commands`: the same consumer groups, folders and object store under `paths`),
    the scripted rollout playing `actions`; each process is named by its restart (`instance`)."""

    run: str
    bootstrap: str
    folder: Path
    tasks: Sequence[Path]
    actions: Path
    paths: Paths
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    generation: dict[str, int] = field(default_factory=dict)
    instances: list[str] = field(default_factory=list)

    def instance(self, kind: str) -> str:
        """The name of the `kind` worker's current process (the restart number is in it)."""
        return f"{self.run}-{kind}-{self.generation[kind]}"

    def argv(self, kind: str) -> list[str]:
        if kind not in WORKER_KINDS:
            raise ValueError(
                f"{kind}: not a worker of `run start --spawn` (start the scheduler with start_scheduler)"
            )
        instance = self.instance(kind)
        self.instances.append(instance)
        commands = worker_commands(
            self.run, self.bootstrap, "scripted", self.tasks, self.paths,
            rollout_args=["--actions", str(self.actions)], instances={kind: instance},
        )  # fmt: skip
        return commands[kind]

    @property
    def streams_data(self) -> Path:
        """The streams worker's RocksDB folder, as `worker_commands` gives it."""
        argv = worker_commands(self.run, self.bootstrap, "scripted", self.tasks, self.paths)["streams"]
        return Path(argv[argv.index("--data-dir") + 1])

    def lose_streams_data(self) -> None:
        """Move the (stopped) streams worker's local state aside, as a replaced machine would have none: its
        next process restores the tables from their changelogs. The old folder stays for a look afterwards."""
        assert self.processes["streams"].poll() is not None, "the streams worker still runs"
        data = self.streams_data
        if data.exists():
            data.rename(data.with_name(f"{data.name}-{self.generation['streams']}"))

    def log(self, kind: str) -> Path:
        return self.folder / "logs" / f"{kind}-{self.generation[kind]}.log"

    def start(self, kind: str, argv: list[str] | None = None) -> subprocess.Popen[bytes]:
        self.generation[kind] = self.generation.get(kind, -1) + 1
        argv = argv or self.argv(kind)
        path = self.log(kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as out:
            process = subprocess.Popen(
                argv,
                cwd=REPO_ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.processes[kind] = process
        return process

    def start_scheduler(self, episodes: int, capacity: int) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable, "-m", "ops.cli", "worker", "scheduler", "--run", self.run, "--bootstrap",
            self.bootstrap, "--episodes", str(episodes), "--capacity", str(capacity), "--group-size", "1",
        ]  # fmt: skip
        return self.start("scheduler", argv)

    def pause(self, kind: str) -> None:
        """SIGSTOP: the worker stops answering, so that the requests it serves stay outstanding until it is
        killed (a grading or a policy answer lasts milliseconds on a fast machine: too short a moment to
        catch by reading the log)."""
        os.kill(self._running(kind).pid, signal.SIGSTOP)

    def kill(self, kind: str) -> None:
        """SIGKILL: a crash, not a shutdown (a paused worker too)."""
        process = self._running(kind)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def _running(self, kind: str) -> subprocess.Popen[bytes]:
        process = self.processes[kind]
        assert process.poll() is None, f"the {kind} worker died before the fault: {self.tail(kind)}"
        return process

    def alive(self) -> dict[str, bool]:
        """The workers (not the scheduler, which exits when the run is done) still running."""
        return {kind: p.poll() is None for kind, p in self.processes.items() if kind != "scheduler"}

    def tail(self, kind: str, chars: int = 3000) -> str:
        text = ""
        for n in range(self.generation.get(kind, 0) + 1):
            path = self.folder / "logs" / f"{kind}-{n}.log"
            if path.exists():
                text += f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}\n"
        return text

    def tails(self) -> str:
        return "\n".join(self.tail(kind) for kind in self.processes)

    def stop(self) -> None:
        stop_processes(self.processes.values(), grace_s=20)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]], *, grace_s: float) -> None:
    """SIGTERM every process still running (SIGCONT first: a frozen one could not stop), wait `grace_s` in
    all for them to exit, then SIGKILL the rest."""
    processes = list(processes)
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    give_up = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, give_up - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class LogView:
    """The run's records so far, folded into what the fault tests check."""

    started: set[str] = field(default_factory=set)
    ended: dict[str, str] = field(default_factory=dict)  # episode -> "completed" | failure class
    executed: dict[str, list[StepExecuted]] = field(default_factory=lambda: defaultdict(list))
    requests: dict[str, list[tuple[str, PolicyRequest | SandboxRequest | VerifyRequest]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    answers: dict[tuple[str, str, int], int] = field(default_factory=lambda: defaultdict(int))
    initial_snapshot: dict[str, str | None] = field(default_factory=dict)
    # A sandbox worker's failure answers (`EpisodeFailed` on sandbox.results), in log order.
    failure_answers: list[EpisodeFailed] = field(default_factory=list)
    # Producer instance -> records it wrote: a restarted worker is serving once its new instance appears.
    producers: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    @property
    def in_flight(self) -> set[str]:
        return self.started - set(self.ended)

    def outstanding_sandbox(self) -> set[str]:
        """Episodes whose newest sandbox request has no StepExecuted yet."""
        out = set()
        for episode in self.in_flight:
            steps = [r for kind, r in self.requests[episode] if kind == "sandbox"]
            if steps:
                newest = max(r.meta.step for r in steps)
                if newest not in {e.meta.step for e in self.executed[episode]}:
                    out.add(episode)
        return out


class Reader:
    """An unsubscribed consumer that keeps reading the run's topics into a `LogView` (survives a broker
    restart: kafka-python reconnects).

    Not `streams.kafka.reader.LogReader`: this one is polled while the faults happen, a broker restart
    included, and must return what it has instead of failing on the end offsets it cannot ask for then;
    and it counts the records the consumer returned twice (`reread`), which the fault test reports."""

    def __init__(self, bootstrap: str, run: str) -> None:
        self.view = LogView()
        self.names = {topic_name(run, base): base for base in READ_TOPICS}
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
        partitions = [
            TopicPartition(name, p)
            for name in self.names
            for p in sorted(self.consumer.partitions_for_topic(name) or ())
        ]
        self.consumer.assign(partitions)
        self.consumer.seek_to_beginning(*partitions)
        self.read_up_to: dict[TopicPartition, int] = {}  # the highest offset read of each partition
        self.reread = 0  # records the consumer returned a second time (skipped)

    def poll(self) -> LogView:
        codec = default_codec()
        for _ in range(20):
            batches = self.consumer.poll(timeout_ms=200, max_records=5000)
            if not batches:
                break
            for tp, batch in batches.items():
                base = self.names[tp.topic]
                for message in batch:
                    # Each record once: across a broker restart the consumer may fetch records it has
                    # returned already, which would read as answers given twice.
                    if message.offset <= self.read_up_to.get(tp, -1):
                        self.reread += 1
                        continue
                    self.read_up_to[tp] = message.offset
                    with contextlib.suppress(DecodeError):
                        self._add(base, codec.decode(message.value or b""))
        return self.view

    def _add(self, base: str, obj: object) -> None:
        view = self.view
        if isinstance(obj, EpisodeStarted):
            view.started.add(obj.meta.episode_id)
            view.initial_snapshot[obj.meta.episode_id] = obj.meta.snapshot_id
        elif isinstance(obj, EpisodeCompleted):
            view.ended[obj.meta.episode_id] = "completed"
        elif isinstance(obj, EpisodeFailed) and base == topics.EPISODE_EVENTS.name:
            view.ended[obj.meta.episode_id] = obj.failure.value
        elif isinstance(obj, EpisodeFailed) and base == topics.SANDBOX_RESULTS.name:
            view.failure_answers.append(obj)
        elif isinstance(obj, StepExecuted) and base == topics.EPISODE_EVENTS.name:
            view.executed[obj.meta.episode_id].append(obj)
        elif isinstance(obj, (PolicyRequest, SandboxRequest, VerifyRequest)):
            kind = base.split(".")[0]
            view.requests[obj.meta.episode_id].append((kind, obj))
        meta = getattr(obj, "meta", None)
        if meta is not None:
            view.producers[meta.producer.instance] += 1
        if base.endswith(".results") and meta is not None:
            view.answers[(base.split(".")[0], meta.episode_id, meta.step)] += 1

    def close(self) -> None:
        self.consumer.close()


def audited_healthy(run: str, bootstrap: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """`trialog audit RUN --json` as a user runs it; its report, asserted healthy: nothing lost, no
    duplicate step, every hash chain intact."""
    audit = subprocess.run(
        [sys.executable, "-m", "ops.cli", "audit", run, "--json", "--bootstrap", bootstrap],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report: dict[str, Any] = json.loads(audit.stdout)
    assert (report["lost"], report["duplicate_steps"], report["broken_chains"]) == (0, 0, 0), report
    return report


def dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, default=str))


def cgroups_running(argv: bytes) -> list[str]:
    """The cgroups of the host's processes whose command line is `argv` (NUL-separated): the Docker engine
    runs on this machine, so a sandbox's processes are visible in /proc (the engine's `top` needs ps, which
    this machine lacks)."""
    groups = []
    for path in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if path.read_bytes() == argv:
                groups.append((path.parent / "cgroup").read_text())
        except OSError:
            continue
    return groups
