"""`trialog bench compare --parts crash`: sandbox-seconds redone per crash, restart from step 0 against
trialog's resume from the last snapshot.

Every episode has `--crash-steps` steps; step 0 writes a small source tree into the workspace, every later
step changes a file and then works for `--crash-step-s` seconds (a tool call, a test run). Each episode is
played twice, on the same warm pool of real Docker sandboxes, with its sandbox killed (`docker kill`) part
way through the same randomly drawn step:

* restart (what frameworks without per-step snapshots do): a fresh sandbox runs the episode again from
  step 0; redone = the part of the step lost in the crash + the new sandbox + steps 0..k-1 again;
* resume (trialog): the episode's sandbox worker (`SandboxWorker`) answers the crash as `sandbox_crash`, the
  owner re-issues the step as the next attempt, and the worker restores the last snapshot into a warm
  sandbox; redone = the part lost + that acquire and restore.

Both sides must end with the same workspace (checked by snapshot id). Resume is not free: every step takes a
snapshot, so the cost of snapshots per episode is reported next to the work they save.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import docker

from ops.bench.report import cpu_model
from ops.cli import kit
from ops.paths import Paths
from ops.stack import docker_engine, images
from sandbox_agent.actions import invocation_for
from sandbox_agent.backend import Sandbox
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.errors import SandboxError
from sandbox_agent.idempotent import MemoryResultStore
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from sandbox_agent.pool import WarmPools
from sandbox_agent.worker import SandboxWorker
from schemas.actions import RunCommand
from schemas.blobs import LocalObjectStore
from schemas.common import EventMeta, FailureClass, Producer
from schemas.events import EpisodeFailed, StepExecuted
from schemas.origin import Origin, SequentialIds, SystemClock
from schemas.requests import ResourceLimits, SandboxRequest
from streams.errors import StackError

SECTION = "## compare: crash cost"
BENCH_LABEL = "dev.trialog.bench"
TARGET_RATIO = 10.0  # issue 19: at least 10x less redone work
LIMITS = ResourceLimits(cpus=1.0, memory_mb=512, pids=128, disk_mb=64)
QUOTAS = Quotas.from_resource_limits(LIMITS)  # what the worker makes of a request's limits: one spec
STEP_TIMEOUT_S = 120.0
CRASHING_EXTRA_S = 60.0  # how much longer the attempt that is killed would work (it never gets there)

# Step 0 writes a source tree (FILES files of 10 KB); step i > 0 appends to one of them, writes its own
# note, then works for the step's time. Deterministic: the same steps give the same workspace on any side.
STEP_SCRIPT = """
import os, sys, time
step, work_s, files = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
if step == 0:
    for i in range(files):
        os.makedirs(f"pkg{i % 10}", exist_ok=True)
        with open(f"pkg{i % 10}/mod{i:03d}.py", "w") as out:
            out.write("".join(f"VALUE_{i}_{j} = {i * j}\\n" for j in range(500)))
else:
    with open(f"pkg{step % 10}/mod{step % files:03d}.py", "a") as out:
        out.write(f"STEP_{step} = {step}\\n")
    os.makedirs("notes", exist_ok=True)
    with open(f"notes/step{step:03d}.txt", "w") as out:
        out.write(f"step {step}\\n")
time.sleep(work_s)
"""
FILES = 100  # about 1 MB of source


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("crash (compare: crash cost)")
    group.add_argument(
        "--crash-episodes", type=kit.positive_int, metavar="N", default=8, help="episodes, each crashed once"
    )
    group.add_argument(
        "--crash-steps", type=kit.positive_int, metavar="N", default=30, help="steps per episode"
    )
    group.add_argument(
        "--crash-step-s",
        type=kit.positive_seconds,
        metavar="S",
        default=0.4,
        help="seconds of work in each step after its file change",
    )
    group.add_argument("--crash-seed", type=int, metavar="N", default=19, help="seed of the crash draws")


# -- the plan and the arithmetic (pure) ------------------------------------------------------------------


@dataclass(frozen=True)
class Crash:
    """Where an episode's sandbox is killed: during `step`, `fraction` of the step's work in."""

    step: int
    fraction: float


def plan_crashes(episodes: int, steps: int, seed: int) -> list[Crash]:
    """One crash per episode, at a step drawn uniformly (any step, the first and the last included)."""
    rng = random.Random(seed)
    return [Crash(rng.randrange(steps), rng.uniform(0.2, 0.8)) for _ in range(episodes)]


@dataclass
class EpisodeCost:
    """One side's seconds for one crashed episode."""

    crash_step: int
    lost_s: float  # the step in flight when the sandbox died, up to the kill
    recovery_s: float  # after the crash, until the episode is back where the crashed step began
    total_s: float  # the whole episode, crash and recovery included
    snapshot_s: float = 0.0  # seconds of per-step snapshots (resume only)
    final_snapshot: str = ""

    @property
    def redone_s(self) -> float:
        return self.lost_s + self.recovery_s


@dataclass
class Comparison:
    restart: list[EpisodeCost] = field(default_factory=list)
    resume: list[EpisodeCost] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)  # exec seconds of every step run without a crash

    @staticmethod
    def mean(costs: list[EpisodeCost], value: Callable[[EpisodeCost], float]) -> float:
        return statistics.fmean(value(cost) for cost in costs)

    @property
    def ratio(self) -> float:
        resume = self.mean(self.resume, lambda cost: cost.redone_s)
        return self.mean(self.restart, lambda cost: cost.redone_s) / resume if resume > 0 else float("inf")


def break_even(saved_per_crash_s: float, snapshots_per_episode_s: float) -> str:
    """When snapshots pay for themselves: more than one crash per N episodes, N = saved / cost."""
    if snapshots_per_episode_s <= 0:
        return "they cost nothing measurable"
    episodes = saved_per_crash_s / snapshots_per_episode_s
    if episodes < 1:
        return f"they pay back only above {1 / episodes:.1f} crashes per episode"
    return f"they pay back once more than one episode in {episodes:.0f} crashes"


def expected_restart_redone(steps: int, step_s: float) -> float:
    """What a restart redoes on average when the crash step is uniform over `steps` steps: (steps-1)/2
    earlier steps, plus (on average) half of the step in flight."""
    return ((steps - 1) / 2 + 0.5) * step_s


# -- measuring -------------------------------------------------------------------------------------------


@dataclass
class Bench:
    client: docker.DockerClient
    backend: DockerBackend
    pools: WarmPools
    spec: SandboxSpec
    args: argparse.Namespace

    def command(self, step: int, *, crashing: bool = False) -> str:
        """The step's command line, as a policy's `RunCommand` carries it. The attempt that crashes works
        on until it is killed: on a loaded machine a kill timed inside a short step could otherwise land
        after the step ended (the lost part is the time up to the kill either way)."""
        work_s = float(self.args.crash_step_s) + (CRASHING_EXTRA_S if crashing else 0.0)
        return shlex.join(["python3", "-c", STEP_SCRIPT, str(step), f"{work_s:g}", str(FILES)])

    def argv(self, step: int, *, crashing: bool = False) -> list[str]:
        """What the sandbox worker runs for that `RunCommand` (`sandbox_agent.actions.invocation_for`)."""
        command = RunCommand(self.command(step, crashing=crashing))
        return list(invocation_for(command, self.backend.snapshots.objects).argv)

    def kill_after(self, sandbox: Sandbox, seconds: float) -> threading.Timer:
        def kill() -> None:
            with contextlib.suppress(docker.errors.APIError):  # gone already: the step failed on its own
                self.client.api.kill(sandbox.id)

        timer = threading.Timer(seconds, kill)
        timer.start()
        return timer

    def crash_delay(self, crash: Crash) -> float:
        """Seconds after a step starts at which to kill its sandbox: inside its work (python's start-up
        and the file change come first, about 0.1 s)."""
        return 0.1 + crash.fraction * float(self.args.crash_step_s)


def play_restart(bench: Bench, crash: Crash, comparison: Comparison) -> EpisodeCost:
    """The episode without snapshots; after the crash a fresh sandbox runs it again from step 0."""
    backend, started = bench.backend, time.perf_counter()
    sandbox = bench.pools.acquire(bench.spec)
    try:
        for step in range(crash.step):
            comparison.step_s.append(_exec(backend, sandbox, bench.argv(step)))
        timer = bench.kill_after(sandbox, bench.crash_delay(crash))
        crashed_at = time.perf_counter()
        try:
            backend.exec(sandbox, bench.argv(crash.step, crashing=True))
        except SandboxError:
            pass
        else:
            raise StackError(
                f"the sandbox killed at step {crash.step} finished its step (make --crash-step-s longer)"
            )
        finally:
            timer.join()
        lost = time.perf_counter() - crashed_at
    finally:
        bench.pools.release(sandbox)
    recovering = time.perf_counter()
    sandbox = bench.pools.acquire(bench.spec)
    try:
        for step in range(crash.step):
            _exec(backend, sandbox, bench.argv(step))
        recovery = time.perf_counter() - recovering
        for step in range(crash.step, bench.args.crash_steps):
            _exec(backend, sandbox, bench.argv(step))
        total = time.perf_counter() - started
        final = str(backend.snapshot(sandbox))  # not timed: only to check both sides end the same
    finally:
        bench.pools.release(sandbox)
    return EpisodeCost(crash.step, lost, recovery, total, final_snapshot=final)


def _exec(backend: DockerBackend, sandbox: Sandbox, argv: list[str]) -> float:
    started = time.perf_counter()
    result = backend.exec(sandbox, argv)
    took = time.perf_counter() - started
    if result.exit_code != 0:
        raise StackError(f"a step failed in its sandbox: {result.stderr[-500:]}")
    return took


def play_resume(bench: Bench, episode: int, crash: Crash, worker: SandboxWorker) -> EpisodeCost:
    """The episode through trialog's sandbox worker, one request per step as the owner issues them; the
    crashed step is re-issued as attempt 2 from the last snapshot."""
    episode_id = f"crash-{episode}"
    snapshot: str | None = None
    snapshot_s, lost, recovery = 0.0, 0.0, 0.0
    started = time.perf_counter()
    try:
        for step in range(bench.args.crash_steps):
            attempt = 1
            if step == crash.step:
                # The sandbox the worker will run this step in (what `handle` gets from `for_step` first).
                sandbox = worker.sandboxes.for_step(episode_id, bench.spec, snapshot)
                timer = bench.kill_after(sandbox, bench.crash_delay(crash))
                crashed_at = time.perf_counter()
                answer = worker.handle(_request(bench, episode_id, step, attempt, snapshot, crashing=True))
                timer.join()
                lost = time.perf_counter() - crashed_at
                if not (isinstance(answer, EpisodeFailed) and answer.failure == FailureClass.SANDBOX_CRASH):
                    raise StackError(f"a sandbox killed at step {step} was answered {answer!r}")
                attempt = 2
                recovering = time.perf_counter()
                worker.sandboxes.for_step(episode_id, bench.spec, snapshot)  # acquire + restore, as `handle`
                recovery = time.perf_counter() - recovering
            asked = time.perf_counter()
            answer = worker.handle(_request(bench, episode_id, step, attempt, snapshot))
            took = time.perf_counter() - asked
            if not isinstance(answer, StepExecuted) or answer.exit_code != 0:
                raise StackError(f"step {step} of {episode_id} was answered {answer!r}")
            snapshot_s += max(0.0, took - answer.duration_us / 1e6)
            snapshot = answer.meta.snapshot_id
        total = time.perf_counter() - started
    finally:
        worker.episode_ended(episode_id)
    assert snapshot is not None
    return EpisodeCost(crash.step, lost, recovery, total, snapshot_s, snapshot)


def _request(
    bench: Bench, episode_id: str, step: int, attempt: int, snapshot: str | None, *, crashing: bool = False
) -> SandboxRequest:
    meta = EventMeta(
        event_id=f"req-{episode_id}-{step}-{attempt}",
        occurred_at_us=time.time_ns() // 1000,
        producer=Producer("streams", "bench-compare"),
        run_id="bench-compare",
        episode_id=episode_id,
        task_id="crash-cost",
        task_version="v1",
        step=step,
        attempt=attempt,
        policy_version=0,
        snapshot_id=snapshot,
        prev_hash=f"{step:064x}",
        traceparent=None,
    )
    command = RunCommand(bench.command(step, crashing=crashing))
    return SandboxRequest(meta, bench.spec.image, command, STEP_TIMEOUT_S, 4096, LIMITS)


def measure_comparison(bench: Bench, worker: SandboxWorker) -> Comparison:
    comparison = Comparison()
    crashes = plan_crashes(bench.args.crash_episodes, bench.args.crash_steps, bench.args.crash_seed)
    for episode, crash in enumerate(crashes):
        _say(f"episode {episode + 1}/{len(crashes)}: crash at step {crash.step}")
        # Alternate which side goes first, so neither always runs on a warmer or quieter machine.
        for side in ("restart", "resume") if episode % 2 == 0 else ("resume", "restart"):
            if side == "restart":
                comparison.restart.append(play_restart(bench, crash, comparison))
            else:
                comparison.resume.append(play_resume(bench, episode, crash, worker))
        if comparison.restart[-1].final_snapshot != comparison.resume[-1].final_snapshot:
            raise StackError(f"episode {episode}: restart and resume ended with different workspaces")
    return comparison


# -- reporting -------------------------------------------------------------------------------------------


def render(args: argparse.Namespace, machine: str, comparison: Comparison) -> str:
    mean = Comparison.mean
    restart, resume = comparison.restart, comparison.resume
    step_p50 = statistics.median(comparison.step_s) if comparison.step_s else 0.0
    redone_restart = mean(restart, lambda cost: cost.redone_s)
    redone_resume = mean(resume, lambda cost: cost.redone_s)
    ratio = comparison.ratio
    snapshots = mean(resume, lambda cost: cost.snapshot_s)
    verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
    command = (
        f"trialog bench compare --parts crash --crash-episodes {args.crash_episodes} "
        f"--crash-steps {args.crash_steps} --crash-step-s {args.crash_step_s:g} "
        f"--crash-seed {args.crash_seed}"
    )

    def row(label: str, costs: list[EpisodeCost]) -> str:
        redone, lost = mean(costs, lambda c: c.redone_s), mean(costs, lambda c: c.lost_s)
        recovery, most = mean(costs, lambda c: c.recovery_s), max(c.redone_s for c in costs)
        total, snaps = mean(costs, lambda c: c.total_s), mean(costs, lambda c: c.snapshot_s)
        return (
            f"| {label} | {redone:.2f} s | {lost:.2f} s | {recovery:.2f} s | {most:.2f} s | {total:.1f} s "
            f"| {snaps:.2f} s |"
        )

    lines = [
        SECTION,
        "",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine} (shared with other work while measured: timings carry its load)",
        f"- command: `{command}`",
        f"- episodes: {args.crash_episodes} of {args.crash_steps} steps in real Docker sandboxes (trialog's "
        f"sandbox image, exec server, {QUOTAS.memory_bytes // MIB} MiB, 1 CPU); step 0 writes a source "
        f"tree of {FILES} files (about 1 MB), each later step changes a file and works "
        f"{args.crash_step_s:g} s; "
        f"one `docker kill` per episode at a step drawn uniformly (seed {args.crash_seed}: steps "
        f"{', '.join(str(c.crash_step) for c in restart)}); both sides alternate and share one warm pool",
        f"- a step without a crash takes {step_p50:.2f} s at p50 (exec only)",
        "",
        "| per crash | redone (mean) | lost step in flight | recovery | redone (max) | episode | "
        "snapshots per episode |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        row("restart from step 0 (fresh sandbox, steps 0..k-1 again)", restart),
        row("trialog resume (sandbox worker: attempt 2 restores the last snapshot)", resume),
        "",
        f"- redone work per crash: {redone_restart:.2f} s restarting against {redone_resume:.2f} s resuming: "
        f"{ratio:.1f}x less (target >= {TARGET_RATIO:g}x: {verdict}); a uniform crash step predicts "
        f"{expected_restart_redone(args.crash_steps, step_p50):.2f} s for the restart at this step time",
        f"- what resume pays for it: {snapshots:.2f} s of snapshots per {args.crash_steps}-step episode "
        f"({snapshots / args.crash_steps * 1000:.0f} ms a step), with or without a crash: "
        f"{break_even(redone_restart - redone_resume, snapshots)}",
        f"- resume redid at most {max(c.redone_s for c in resume):.2f} s per crash: the part of the step in "
        f"flight lost (at most {max(c.lost_s for c in resume):.2f} s; a step takes up to "
        f"{max(comparison.step_s, default=0.0):.2f} s) plus the acquire and restore (at most "
        f"{max(c.recovery_s for c in resume):.2f} s), the design's bound; every restarted and resumed "
        "episode ended with the same workspace (checked: the same snapshot id)",
    ]
    return "\n".join(lines) + "\n"


# -- the part --------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> str:
    """The part's section of BENCHMARKS.md."""
    load_before = os.getloadavg()[0]
    comparison = measured(args)
    load = f"1-minute load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    return render(args, f"{cpu_model()}, {os.cpu_count()} cores; {load}", comparison)


def measured(args: argparse.Namespace) -> Comparison:
    """Both sides of every crashed episode, on the stack's Docker engine; no container is left."""
    paths = Paths.from_env()
    engine = docker_engine.require(paths)
    client = engine.client()
    if images.missing(client):
        raise StackError(f"images missing: {images.missing(client)}", "run `trialog sandbox images` first")
    spec = SandboxSpec(str(images.sandbox_ref()), QUOTAS)
    scratch = Path(tempfile.mkdtemp(prefix="trialog-bench-crash-"))
    store = LocalObjectStore(scratch / "objects")
    backend = DockerBackend(client, store, labels={BENCH_LABEL: "crash"})
    pools = WarmPools(backend, size=2, idle_s=None)
    origin = Origin(Producer("sandbox", "bench-compare"), SystemClock(), SequentialIds("bench-crash"))
    worker = SandboxWorker(backend, pools, MemoryResultStore(), store, origin)
    try:
        pools.pool(spec).wait_ready()
        return measure_comparison(Bench(client, backend, pools, spec, args), worker)
    finally:
        worker.close()
        pools.close()
        for container in client.containers.list(all=True, filters={"label": f"{BENCH_LABEL}=crash"}):
            container.remove(force=True)
        shutil.rmtree(scratch, ignore_errors=True)
        client.close()


def _say(message: str) -> None:
    print(f"   {message}", file=sys.stderr, flush=True)
