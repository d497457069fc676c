"""`trialog bench sandbox`: what a step costs in trialog's sandboxes against plain Docker, side by side.

In one run, on this machine's Docker engine: a fresh `docker run --rm` per step (what a SWE-bench-style
harness pays) against trialog's warm acquire + exec; a raw `docker exec` against trialog's exec (process
group, timeout, capped output); snapshot and restore of 1 MB and 10 MB workspaces (cold: first snapshot
into an empty store; step: one file changed since the last snapshot; unchanged); and sustained sandbox
creations per second. Plain Docker and trialog are measured in alternating rounds on a quiet machine (the
pool is refilled and released sandboxes are destroyed before each timed round).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker

from ops.bench.report import cpu_model, memory_gib, write_section
from ops.cli import kit
from ops.paths import Paths
from ops.stack import docker_engine, images
from sandbox_agent.backend import Sandbox
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.pool import WarmPool
from schemas.blobs import LocalObjectStore
from streams.errors import StackError

REPO_ROOT = Path(__file__).resolve().parents[2]
SECTION = "## sandbox"
BENCH_LABEL = "dev.trialog.bench"
FILE_BYTES = 10 * 1024  # workspaces are made of 10 KB files, like a source tree
TARGETS = {
    "acquire_ms": 10.0,
    "exec_overhead": 0.10,
    "snapshot_ms": 150.0,
    "restore_ms": 300.0,
    "speedup": 5.0,
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rounds",
        type=kit.positive_int,
        metavar="N",
        default=15,
        help="rounds of docker run vs warm acquire+exec",
    )
    parser.add_argument(
        "--exec-rounds", type=kit.positive_int, metavar="N", default=60, help="rounds of raw vs trialog exec"
    )
    parser.add_argument(
        "--snapshot-rounds", type=kit.positive_int, metavar="N", default=7, help="rounds per workspace size"
    )
    parser.add_argument(
        "--sustain-s",
        type=kit.positive_seconds,
        metavar="S",
        default=10.0,
        help="seconds of create+destroy per load",
    )
    parser.add_argument("--pool", type=kit.positive_int, metavar="N", default=3, help="warm pool size")
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "sandbox")


# -- measuring ---------------------------------------------------------------------------------------


@dataclass
class Samples:
    label: str
    unit: str = "ms"
    values: list[float] = field(default_factory=list)  # seconds

    def add(self, seconds: float) -> None:
        self.values.append(seconds)

    @property
    def p50(self) -> float:
        return statistics.median(self.values)

    @property
    def p90(self) -> float:
        ordered = sorted(self.values)
        return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]

    def row(self) -> str:
        scale, digits = (1000.0, 1) if self.unit == "ms" else (1.0, 3)
        p50, p90 = f"{self.p50 * scale:,.{digits}f}", f"{self.p90 * scale:,.{digits}f}"
        return f"| {self.label} | {p50} {self.unit} | {p90} {self.unit} | {len(self.values)} |"


@contextmanager
def timed(samples: Samples) -> Iterator[None]:
    started = time.perf_counter()
    yield
    samples.add(time.perf_counter() - started)


@dataclass
class Bench:
    client: docker.DockerClient
    backend: DockerBackend
    pool: WarmPool
    spec: SandboxSpec
    scratch: Path
    docker_host: str
    released: int = 0

    def release(self, sandbox: Sandbox) -> None:
        self.pool.release(sandbox)
        self.released += 1

    def settle(self) -> None:
        """Wait until the pool is full again and every released sandbox is gone: a quiet machine."""
        give_up = time.monotonic() + 120
        while time.monotonic() < give_up:
            stats = self.pool.stats()
            if stats.ready >= self.pool.size and stats.destroyed >= self.released:
                return
            time.sleep(0.02)
        raise StackError("the warm pool did not settle within 120 s")


def docker_run_vs_warm(bench: Bench, rounds: int) -> dict[str, Samples]:
    cli = Samples("`docker run --rm --network none IMG true` per step (CLI)", "s")
    sdk = Samples("the same through the SDK (`containers.run(remove=True)`)", "s")
    acquire = Samples("trialog warm acquire")
    step = Samples("trialog warm acquire + exec (`true`) per step")
    image = bench.spec.image
    docker_cli = shutil.which("docker")
    for _ in range(rounds):
        if docker_cli is not None:
            bench.settle()
            with timed(cli):
                argv = [
                    docker_cli,
                    "run",
                    "--rm",
                    "--network",
                    "none",
                    "--label",
                    f"{BENCH_LABEL}=1",
                    image,
                    "true",
                ]
                subprocess.run(argv, env={**os.environ, "DOCKER_HOST": bench.docker_host}, check=True)
        bench.settle()
        with timed(sdk):
            bench.client.containers.run(
                image, ["true"], network_mode="none", remove=True, labels={BENCH_LABEL: "1"}
            )
        bench.settle()
        started = time.perf_counter()
        sandbox = bench.pool.acquire()
        acquire.add(time.perf_counter() - started)
        result = bench.backend.exec(sandbox, ["true"])
        step.add(time.perf_counter() - started)
        assert result.exit_code == 0, result
        bench.release(sandbox)
    measured = {"run_rm_sdk": sdk, "acquire": acquire, "step": step}
    return {"run_rm_cli": cli, **measured} if cli.values else measured


def exec_overhead(bench: Bench, rounds: int) -> dict[str, Samples]:
    raw = Samples("raw `docker exec` (`true`, SDK exec_run)")
    ours = Samples("trialog exec (`true`)")
    fallback = Samples("trialog exec through `docker exec` (fallback path)")
    sandbox = bench.pool.acquire()
    plain = DockerBackend(
        bench.client, bench.backend.snapshots.objects, labels={BENCH_LABEL: "1"}, exec_channel=False
    )
    other = plain.create(bench.spec)
    bench.settle()  # the pool's refill is done before anything is timed
    container = bench.client.containers.get(sandbox.id)
    try:
        for round_ in range(rounds + 3):
            order: list[tuple[Samples, Callable[[], object]]] = [
                (raw, lambda: container.exec_run(["true"])),
                (ours, lambda: bench.backend.exec(sandbox, ["true"])),
                (fallback, lambda: plain.exec(other, ["true"])),
            ]
            for samples, run in order if round_ % 2 else reversed(order):
                started = time.perf_counter()
                run()
                if round_ >= 3:  # the first rounds warm the engine's and the client's caches
                    samples.add(time.perf_counter() - started)
    finally:
        bench.release(sandbox)
        plain.destroy(other)
    return {"raw_exec": raw, "exec": ours, "exec_fallback": fallback}


def workspace_files(total_bytes: int, seed: int) -> dict[str, bytes]:
    count = max(1, total_bytes // FILE_BYTES)
    rng = random.Random(seed)
    return {f"pkg{i % 10}/mod{i:04d}.py": rng.randbytes(FILE_BYTES) for i in range(count)}


def snapshots(bench: Bench, total_bytes: int, rounds: int) -> dict[str, Samples]:
    mb = total_bytes // MIB
    cold = Samples(f"snapshot {mb} MB, cold (first, empty store)")
    step = Samples(f"snapshot {mb} MB, per step (1 file changed)")
    unchanged = Samples(f"snapshot {mb} MB, unchanged")
    restore = Samples(f"restore {mb} MB into a warm sandbox")
    files = workspace_files(total_bytes, seed=mb)
    for round_ in range(rounds):
        # A fresh store for a cold snapshot, and sandboxes of that backend's own: a sandbox's exec channel
        # belongs to the backend that made it.
        store = LocalObjectStore(bench.scratch / f"store-{mb}-{round_}")
        backend = DockerBackend(bench.client, store, labels={BENCH_LABEL: "1"})
        source, target = backend.create(bench.spec), backend.create(bench.spec)
        bench.settle()
        try:
            backend.write_files(source, files)
            time.sleep(0.1)  # files written a while before the snapshot, as in a real step
            with timed(cold):
                backend.snapshot(source)
            backend.exec(source, ["sh", "-c", f"echo {round_} >> pkg0/mod0000.py"])
            with timed(step):
                snapshot_id = backend.snapshot(source)
            with timed(unchanged):
                assert backend.snapshot(source) == snapshot_id
            with timed(restore):
                backend.restore(target, snapshot_id)
            if round_ == 0:
                assert_identical(backend, target, snapshot_id)
        finally:
            backend.destroy(source)
            backend.destroy(target)
    return {f"cold_{mb}": cold, f"step_{mb}": step, f"unchanged_{mb}": unchanged, f"restore_{mb}": restore}


def assert_identical(backend: DockerBackend, sandbox: Sandbox, snapshot_id: SnapshotId) -> None:
    if backend.snapshot(sandbox) != snapshot_id:
        raise StackError("a restored workspace does not snapshot to the id it was restored from")


def creations(bench: Bench, sustain_s: float) -> dict[str, Samples]:
    single = Samples("create + start one sandbox (no pool)")
    bench.settle()
    for _ in range(8):
        with timed(single):
            sandbox = bench.backend.create(bench.spec)
        bench.backend.destroy(sandbox)
    rates = {"create_1": single}
    for workers in (1, 4):
        rate = Samples(f"sustained creations/s, {workers} thread(s) creating and destroying", "/s")
        rate.add(sustained_rate(bench, workers, sustain_s))
        rates[f"rate_{workers}"] = rate
    return rates


def sustained_rate(bench: Bench, workers: int, seconds: float) -> float:
    stop_at = time.monotonic() + seconds
    counted = [0]
    lock = threading.Lock()

    def churn() -> None:
        while time.monotonic() < stop_at:
            sandbox = bench.backend.create(bench.spec)
            with lock:
                counted[0] += 1
            bench.backend.destroy(sandbox)

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as executor:
        for future in [executor.submit(churn) for _ in range(workers)]:
            future.result()
    return counted[0] / (time.monotonic() - started)


# -- reporting ---------------------------------------------------------------------------------------


def _machine(client: docker.DockerClient) -> str:
    model, memory = cpu_model(), memory_gib()
    info: dict[str, Any] = client.info()
    return (
        f"{model}, {os.cpu_count()} cores, {memory:.0f} GiB; Docker {info.get('ServerVersion')} "
        f"({info.get('Driver')}, cgroup v{info.get('CgroupVersion', '?')}); "
        f"Python {platform.python_version()}"
    )


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def render(args: argparse.Namespace, machine: str, spec: SandboxSpec, s: dict[str, Samples]) -> str:
    acquire_ms = s["acquire"].p50 * 1000
    overhead = s["exec"].p50 / s["raw_exec"].p50 - 1
    fallback_overhead = s["exec_fallback"].p50 / s["raw_exec"].p50 - 1
    baseline = s.get("run_rm_cli", s["run_rm_sdk"])
    speedup, speedup_sdk = baseline.p50 / s["step"].p50, s["run_rm_sdk"].p50 / s["step"].p50
    snap_step, snap_cold = s["step_10"].p50 * 1000, s["cold_10"].p50 * 1000
    restore_ms = s["restore_10"].p50 * 1000
    command = (
        f"trialog bench sandbox --rounds {args.rounds} --exec-rounds {args.exec_rounds} "
        f"--snapshot-rounds {args.snapshot_rounds} --sustain-s {args.sustain_s:g} --pool {args.pool}"
    )
    quotas = spec.quotas
    lines = [
        SECTION,
        "",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine}",
        f"- command: `{command}`",
        f"- sandbox: `{spec.image}`, {quotas.memory_bytes // MIB} MiB, {quotas.cpus:g} CPU, "
        f"{quotas.pids} pids, /workspace {quotas.workspace_bytes // MIB} MiB; workspaces of 10 KB files; "
        "snapshots into a local object store",
        "",
        "| measure | p50 | p90 | n |",
        "| --- | ---: | ---: | ---: |",
        *(samples.row() for samples in s.values()),
        "",
        f"- warm acquire: p50 {acquire_ms:.3f} ms "
        f"(target <= {TARGETS['acquire_ms']:g} ms: {_verdict(acquire_ms <= TARGETS['acquire_ms'])})",
        f"- exec overhead over a raw Docker exec: {overhead:+.1%} at p50 "
        f"(target <= {TARGETS['exec_overhead']:.0%}: {_verdict(overhead <= TARGETS['exec_overhead'])}); "
        f"through `docker exec` when a sandbox has no exec channel: {fallback_overhead:+.1%}",
        f"- snapshot p50 at 10 MB: {snap_step:.0f} ms per step, {snap_cold:.0f} ms cold "
        f"(target <= {TARGETS['snapshot_ms']:g} ms: "
        f"per step {_verdict(snap_step <= TARGETS['snapshot_ms'])}, "
        f"cold {_verdict(snap_cold <= TARGETS['snapshot_ms'])})",
        f"- restore p50 at 10 MB: {restore_ms:.0f} ms "
        f"(target <= {TARGETS['restore_ms']:g} ms: {_verdict(restore_ms <= TARGETS['restore_ms'])})",
        f"- seconds per step: `docker run --rm` {baseline.p50:.3f} s vs warm acquire + exec "
        f"{s['step'].p50 * 1000:.1f} ms: {speedup:.1f}x fewer "
        f"(target >= {TARGETS['speedup']:g}x: {_verdict(speedup >= TARGETS['speedup'])}); "
        f"against the SDK call ({s['run_rm_sdk'].p50:.3f} s, no CLI start-up): {speedup_sdk:.1f}x "
        f"({_verdict(speedup_sdk >= TARGETS['speedup'])})",
    ]
    return "\n".join(lines) + "\n"


# -- the run -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    paths = Paths.from_env()
    engine = docker_engine.require(paths)
    client = engine.client()
    if images.missing(client):
        raise StackError(f"images missing: {images.missing(client)}", "run `trialog sandbox images` first")
    spec = SandboxSpec(
        str(images.sandbox_ref()),
        Quotas(memory_bytes=1024 * MIB, workspace_bytes=256 * MIB, tmp_bytes=64 * MIB),
    )
    scratch = Path(tempfile.mkdtemp(prefix="trialog-bench-sandbox-"))
    backend = DockerBackend(client, LocalObjectStore(scratch / "objects"), labels={BENCH_LABEL: "1"})
    samples: dict[str, Samples] = {}
    try:
        with WarmPool(backend, spec, size=args.pool) as pool:
            bench = Bench(client, backend, pool, spec, scratch, engine.url)
            _say("docker run --rm vs warm acquire + exec")
            samples |= docker_run_vs_warm(bench, args.rounds)
            _say("raw docker exec vs trialog exec")
            samples |= exec_overhead(bench, args.exec_rounds)
            for size in (1 * MIB, 10 * MIB):
                _say(f"snapshot and restore, {size // MIB} MB")
                samples |= snapshots(bench, size, args.snapshot_rounds)
            _say("sandbox creations")
            samples |= creations(bench, args.sustain_s)
    finally:
        for container in client.containers.list(all=True, filters={"label": BENCH_LABEL}):
            container.remove(force=True)
        shutil.rmtree(scratch, ignore_errors=True)
    section = render(args, _machine(client), spec, samples)
    client.close()
    print(section)
    if not args.no_record:
        write_section(args.record, section)
        print(f"wrote {args.record}", file=sys.stderr)
    return 0


def _say(message: str) -> None:
    print(f"-> {message} ...", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trialog bench sandbox", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
