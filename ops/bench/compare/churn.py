"""`trialog bench compare --parts churn`: sandbox churn, create+start latency and sustained sandboxes per
second, against `docker run`, for every way of starting a container this engine allows.

Each variant is measured the same way, in turns with the others in one run on one engine (a load that comes
and goes on a shared machine falls on all alike): `--churn-rounds` create+starts (p50, p90; the container is
removed after each, untimed), then `--churn-sustain-s` seconds of sustained churn (create, start, remove in
a loop, in slices taken in turns) by 1 thread and by `--churn-threads` threads. A create+start is done
when the container runs (`docker run -d` returns, the SDK's start call returns) and, for trialog's
sandboxes, when its exec server has said hello (ready for a step). Variants:

* `docker run -d` (the CLI: what a harness that shells out pays);
* the SDK's create + start with a bare config (`sleep` as PID 1, no network), and the same with the log
  driver `none` (no log file, no log copier);
* trialog's sandbox (`DockerBackend.create`: read-only root, three tmpfs mounts, seccomp, capabilities,
  quotas, its exec server as PID 1 and its hello), its container config without the exec server, and a
  sandbox created ahead and only started on demand (`DockerBackend.prepare` then `start`: only the start is
  timed, so its sustained rate is the full create's);
* trialog's warm pool: a started sandbox handed out (acquire);
* each of the above that takes a runtime, once per OCI runtime the engine has registered (runc always;
  crun where `TRIALOG_CRUN=1 trialog up` registered it: `ops/stack/runtimes.py`).

Every container a variant creates carries a label and is removed; the part checks that none is left.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
from docker.errors import NotFound
from docker.types import LogConfig

from ops.bench.report import cpu_model, memory_gib
from ops.cli import kit
from ops.paths import Paths
from ops.stack import docker_engine, images
from ops.stack.runtimes import CRUN, registered
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from sandbox_agent.pool import WarmPool
from schemas.blobs import LocalObjectStore
from streams.errors import StackError

SECTION = "## compare: sandbox churn"
BENCH_LABEL = "dev.trialog.bench"
LABEL_VALUE = "churn"
TARGET_P50_MS = 90.0  # Daytona's advertised sandbox creation
TARGET_PER_S = 10.0  # Firecracker: 5 microVMs per core per second, on 2 cores
QUOTAS = Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=32 * MIB)
BARE_COMMAND = ["sleep", "infinity"]
WARM_ROUNDS = 2
CLI = "`docker run -d --network none IMG sleep infinity` (CLI)"
BARE = "SDK create + start, bare config"
TRIALOG = "trialog sandbox (`DockerBackend.create`, exec server ready)"
AHEAD = "trialog sandbox created ahead, started on demand (`prepare`; `start` timed)"
NO_SERVER = "trialog's container config, exec server not waited for"
POOL = "trialog warm pool acquire (a started sandbox handed out)"
SLICES = 3  # turns each variant's sustained churn is cut into


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("churn (compare: sandbox churn)")
    group.add_argument(
        "--churn-rounds",
        type=kit.positive_int,
        metavar="N",
        default=15,
        help="create+starts timed per variant",
    )
    group.add_argument(
        "--churn-sustain-s",
        type=kit.positive_seconds,
        metavar="S",
        default=6.0,
        help="seconds of sustained create, start, remove per variant and load",
    )
    group.add_argument(
        "--churn-threads",
        type=kit.positive_int,
        metavar="N",
        default=4,
        help="threads creating at once for the parallel sustained rate",
    )


# -- what is measured (pure) -----------------------------------------------------------------------------


@dataclass
class Result:
    """One variant's figures: create+start seconds, and sandboxes per second by number of threads."""

    name: str
    runtime: str
    latencies: list[float] = field(default_factory=list)
    rates: dict[int, float] = field(default_factory=dict)
    note: str = ""

    @property
    def p50(self) -> float:
        return statistics.median(self.latencies)

    @property
    def p90(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]

    @property
    def best_rate(self) -> float:
        return max(self.rates.values(), default=0.0)


def meets(result: Result) -> tuple[bool, bool]:
    """Whether a variant meets the latency target and the rate target (a variant without a sustained rate
    of its own, such as the warm pool's acquire, meets no rate target)."""
    return result.p50 * 1000 <= TARGET_P50_MS, result.best_rate >= TARGET_PER_S


def sustained(cycle: Callable[[], None], threads: int, seconds: float) -> tuple[int, float]:
    """Cycles completed while `threads` threads run `cycle` back to back for `seconds`, and the seconds
    it took (the last cycles end past `seconds`)."""
    stop_at = time.monotonic() + seconds
    done = [0]
    lock = threading.Lock()

    def loop() -> None:
        while time.monotonic() < stop_at:
            cycle()
            with lock:
                done[0] += 1

    started = time.monotonic()
    with ThreadPoolExecutor(threads) as executor:
        for future in [executor.submit(loop) for _ in range(threads)]:
            future.result()
    return done[0], time.monotonic() - started


# -- the variants ----------------------------------------------------------------------------------------


@dataclass
class Variant:
    """`make` is timed (from nothing, or from what `ahead` made untimed, to a running container);
    `remove` undoes it. Without `ahead` a cycle is make + remove; with it, ahead + make + remove."""

    name: str
    runtime: str
    make: Callable[[Any], Any]
    remove: Callable[[Any], None]
    ahead: Callable[[], Any] | None = None
    note: str = ""

    def cycle(self) -> None:
        self.remove(self.make(self.ahead() if self.ahead else None))


@dataclass
class Engine:
    client: docker.DockerClient
    url: str
    image: str
    scratch: Path

    @property
    def objects(self) -> LocalObjectStore:
        return LocalObjectStore(self.scratch / "objects")

    @property
    def labels(self) -> dict[str, str]:
        return {BENCH_LABEL: LABEL_VALUE}

    def runtimes(self) -> list[str]:
        """The OCI runtimes this engine has registered, its default first."""
        return registered(self.client)

    def remove(self, container_id: str) -> None:
        with contextlib.suppress(NotFound):  # removed already
            self.client.api.remove_container(container_id, force=True, v=True)


def cli_variant(engine: Engine) -> Variant:
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise StackError("no docker CLI on PATH", "install Debian's docker.io (`trialog prepare`)")
    argv = [docker_cli, "run", "-d", "--network", "none", "--label", f"{BENCH_LABEL}={LABEL_VALUE}"]
    env = {**os.environ, "DOCKER_HOST": engine.url}

    def make(_: None) -> str:
        done = subprocess.run([*argv, engine.image, *BARE_COMMAND], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise StackError(f"docker run failed: {done.stderr.strip()[-300:]}")
        return done.stdout.strip()

    return Variant(CLI, "default", make, engine.remove)


def sdk_variant(engine: Engine, runtime: str, *, no_logs: bool) -> Variant:
    api: Any = engine.client.api
    host_config = api.create_host_config(
        network_mode="none", runtime=runtime, log_config=LogConfig(type="none") if no_logs else None
    )

    def make(_: None) -> str:
        created = api.create_container(
            engine.image, BARE_COMMAND, labels=engine.labels, host_config=host_config
        )
        api.start(created["Id"])
        return str(created["Id"])

    name = BARE + (", log driver `none`" if no_logs else "")
    return Variant(name, runtime, make, engine.remove)


def trialog_variants(engine: Engine, runtime: str, spec: SandboxSpec) -> list[Variant]:
    """trialog's sandbox made from nothing, and created ahead then only started."""
    backend = DockerBackend(engine.client, engine.objects, labels=engine.labels, runtime=runtime)
    return [
        Variant(
            TRIALOG,
            runtime,
            lambda _: backend.create(spec),
            backend.destroy,
        ),
        Variant(
            AHEAD,
            runtime,
            backend.start,
            backend.destroy,
            ahead=lambda: backend.prepare(spec),
            note="only the start is timed; the sustained rate includes the create, done ahead",
        ),
    ]


def no_server_variant(engine: Engine, runtime: str, spec: SandboxSpec) -> Variant:
    """trialog's container config with its exec server as PID 1 but no hello waited for: what the
    config costs without the server's start-up."""
    bare = DockerBackend(
        engine.client, engine.objects, labels=engine.labels, runtime=runtime, exec_channel=False
    )
    return Variant(
        NO_SERVER,
        runtime,
        lambda _: bare.create(spec),
        bare.destroy,
        note="not a sandbox trialog would use: its commands would go through `docker exec`",
    )


def variants_for(engine: Engine, runtimes: list[str], spec: SandboxSpec) -> list[Variant]:
    """Every runtime with the bare config; the default runtime and crun with trialog's sandbox; the
    cheaper configs once, with the default runtime."""
    default = runtimes[0]
    variants = [cli_variant(engine)]
    variants += [sdk_variant(engine, runtime, no_logs=False) for runtime in runtimes]
    variants.append(sdk_variant(engine, default, no_logs=True))
    for runtime in [default, *(name for name in runtimes if name == CRUN and name != default)]:
        variants += trialog_variants(engine, runtime, spec)
    variants.append(no_server_variant(engine, default, spec))
    return variants


def measure_variants(variants: list[Variant], args: argparse.Namespace) -> list[Result]:
    """Every variant measured in turns, so that a load that comes and goes on a shared machine falls on all
    of them alike: each latency round runs every variant once (in alternating order), and each load's
    sustained churn is cut into slices taken in turns, the rate being all cycles over all seconds."""
    results = [Result(variant.name, variant.runtime, note=variant.note) for variant in variants]
    pairs = list(zip(variants, results, strict=True))
    for round_ in range(args.churn_rounds + WARM_ROUNDS):
        for variant, result in pairs if round_ % 2 == 0 else reversed(pairs):
            made = variant.ahead() if variant.ahead else None
            started = time.perf_counter()
            made = variant.make(made)
            took = time.perf_counter() - started
            variant.remove(made)
            if round_ >= WARM_ROUNDS:  # the first rounds warm the engine's and the client's caches
                result.latencies.append(took)
    for threads in sorted({1, args.churn_threads}):
        counts = {id(variant): (0, 0.0) for variant in variants}
        for slice_ in range(SLICES):
            _say(f"sustained churn, {threads} thread(s), slice {slice_ + 1}/{SLICES}")
            for variant, _ in pairs if slice_ % 2 == 0 else reversed(pairs):
                done, took = sustained(variant.cycle, threads, args.churn_sustain_s / SLICES)
                before = counts[id(variant)]
                counts[id(variant)] = (before[0] + done, before[1] + took)
        for variant, result in pairs:
            done, took = counts[id(variant)]
            result.rates[threads] = done / took
    return results


def measure_pool(engine: Engine, spec: SandboxSpec, args: argparse.Namespace) -> Result:
    """A warm pool hands out a sandbox started before it was asked for; refilled between rounds."""
    backend = DockerBackend(engine.client, LocalObjectStore(engine.scratch / "pool"), labels=engine.labels)
    result = Result(POOL, "default")
    result.note = "refilled in the background by the create above: its sustained rate is that create's"
    with WarmPool(backend, spec, size=2) as pool:
        for _ in range(args.churn_rounds):
            pool.wait_ready(2, timeout_s=120)
            started = time.perf_counter()
            sandbox = pool.acquire()
            result.latencies.append(time.perf_counter() - started)
            pool.release(sandbox)
    return result


# -- reporting -------------------------------------------------------------------------------------------


def render(args: argparse.Namespace, machine: str, results: list[Result], runtimes: list[str]) -> str:
    threads = sorted({1, args.churn_threads})
    command = (
        f"trialog bench compare --parts churn --churn-rounds {args.churn_rounds} "
        f"--churn-sustain-s {args.churn_sustain_s:g} --churn-threads {args.churn_threads}"
    )
    rate_heads = " | ".join(f"per s, {n} thread{'s' if n > 1 else ''}" for n in threads)
    lines = [
        SECTION,
        "",
        f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine} (shared with other work while measured: timings carry its load)",
        f"- command: `{command}`",
        f"- OCI runtimes registered in this engine: {', '.join(runtimes)} (io.containerd.*: runc under "
        "containerd's shims)",
        "- create+start: until the container runs (for trialog's sandbox: until its exec server said hello), "
        f"p50 and p90 of {args.churn_rounds}; per second: create, start and remove back to back for "
        f"{args.churn_sustain_s:g} s; targets: p50 <= {TARGET_P50_MS:g} ms, >= {TARGET_PER_S:g} per second",
        "",
        f"| variant | runtime | p50 | p90 | {rate_heads} | p50 target | per-second target |",
        "| --- | --- | ---: | ---: | " + " | ".join("---:" for _ in threads) + " | --- | --- |",
    ]
    for result in results:
        rates = " | ".join(f"{result.rates[n]:.1f}" if n in result.rates else "-" for n in threads)
        fast, many = meets(result)
        rate_verdict = _verdict(many) if result.rates else "- (see note)"
        lines.append(
            f"| {result.name} | {result.runtime} | {result.p50 * 1000:.0f} ms | {result.p90 * 1000:.0f} ms "
            f"| {rates} | {_verdict(fast)} | {rate_verdict} |"
        )
    lines += ["", *reading(results), *where_time_goes(results, runtimes[0])]
    notes = [f"- {result.name} ({result.runtime}): {result.note}" for result in results if result.note]
    return "\n".join([*lines, *notes]) + "\n"


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def reading(results: list[Result]) -> list[str]:
    """What the table says, computed from it: the baseline, the best of each measure, crun against runc."""
    baseline = next(result for result in results if result.name == CLI)
    made = [result for result in results if result.rates]  # the pool's acquire makes nothing
    fastest = min(made, key=lambda result: result.p50)
    most = max(made, key=lambda result: result.best_rate)
    lines = [
        f"- `docker run -d`: {baseline.p50 * 1000:.0f} ms, {baseline.best_rate:.1f} per second",
        f"- fastest create+start: {fastest.name} ({fastest.runtime}), {fastest.p50 * 1000:.0f} ms "
        f"(target {_verdict(fastest.p50 * 1000 <= TARGET_P50_MS)})",
        f"- most per second: {most.name} ({most.runtime}), {most.best_rate:.1f} "
        f"(target {_verdict(most.best_rate >= TARGET_PER_S)})",
    ]
    by_name: dict[str, dict[str, Result]] = {}
    for result in results:
        by_name.setdefault(result.name, {})[result.runtime] = result
    for name, runtimes in by_name.items():
        if CRUN in runtimes and len(runtimes) > 1:
            crun = runtimes[CRUN]
            runc = next(result for runtime, result in runtimes.items() if runtime != CRUN)
            lines.append(
                f"- crun against {runc.runtime}, {name}: p50 {runc.p50 * 1000:.0f} -> "
                f"{crun.p50 * 1000:.0f} ms, {runc.best_rate:.1f} -> {crun.best_rate:.1f} per second"
            )
    return lines


def where_time_goes(results: list[Result], default: str) -> list[str]:
    """trialog's create+start taken apart by the variants that leave one piece out each (p50 differences,
    so only roughly additive), and whether the engine's own path already misses the target."""
    p50 = {(result.name, result.runtime): result.p50 * 1000 for result in results}
    needed = [(BARE, default), (NO_SERVER, default), (TRIALOG, default), (AHEAD, default), (POOL, "default")]
    if not all(key in p50 for key in needed):
        return []
    bare, no_server, full, ahead, pool = (p50[key] for key in needed)
    floor = min(value for (name, _), value in p50.items() if name == BARE)
    lines = [
        f"- where trialog's create+start goes ({default}, p50 differences): the engine's bare create+start "
        f"{bare:.0f} ms, trialog's container config (read-only root, tmpfs mounts, seccomp, quotas) "
        f"{no_server - bare:+.0f} ms, its exec server's start and hello {full - no_server:+.0f} ms; "
        f"creating ahead takes {full - ahead:.0f} ms (the create) off the on-demand path",
    ]
    if floor > TARGET_P50_MS:
        lines.append(
            f"- the engine's own path (dockerd, containerd, a shim, the runtime) with nothing of trialog's "
            f"takes {floor:.0f} ms at best here, above the {TARGET_P50_MS:g} ms target by itself: no sandbox "
            f"config meets it on this engine and machine; trialog keeps create+start off an episode's path "
            f"with its warm pool ({pool:.1f} ms to acquire), whose refill rate is the create's"
        )
    return lines


# -- the part --------------------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> str:
    """The part's section of BENCHMARKS.md."""
    load_before = os.getloadavg()[0]
    results, runtimes, machine = measured(args)
    machine += f"; 1-minute load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    return render(args, machine, results, runtimes)


def measured(args: argparse.Namespace) -> tuple[list[Result], list[str], str]:
    """Every variant's figures, the engine's runtimes and the machine; no churn container is left."""
    paths = Paths.from_env()
    engine_url = docker_engine.require(paths).url
    client = docker.DockerClient(base_url=engine_url, timeout=120)
    if images.missing(client):
        raise StackError(f"images missing: {images.missing(client)}", "run `trialog sandbox images` first")
    spec = SandboxSpec(str(images.sandbox_ref()), QUOTAS)
    engine = Engine(client, engine_url, spec.image, Path(tempfile.mkdtemp(prefix="trialog-bench-churn-")))
    runtimes = engine.runtimes()
    results: list[Result] = []
    try:
        variants = variants_for(engine, runtimes, spec)
        _say(f"{len(variants)} variants: create+start rounds")
        results += measure_variants(variants, args)
        _say("warm pool acquire")
        results.append(measure_pool(engine, spec, args))
        left = leftovers(client)
        if left:
            raise StackError(f"{len(left)} churn containers were left behind: {', '.join(left[:5])}")
        machine = _machine(client)
    finally:
        for container_id in leftovers(client):
            engine.remove(container_id)
        shutil.rmtree(engine.scratch, ignore_errors=True)
        client.close()
    return results, runtimes, machine


def leftovers(client: docker.DockerClient) -> list[str]:
    found = client.api.containers(all=True, filters={"label": f"{BENCH_LABEL}={LABEL_VALUE}"})
    return [str(container["Id"]) for container in found]


def _machine(client: docker.DockerClient) -> str:
    info: dict[str, Any] = client.info()
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {memory_gib():.0f} GiB; "
        f"Docker {info.get('ServerVersion')} ({info.get('Driver')}, "
        f"cgroup v{info.get('CgroupVersion', '?')}); "
        f"Python {platform.python_version()}"
    )


def _say(message: str) -> None:
    print(f"   {message}", file=sys.stderr, flush=True)
