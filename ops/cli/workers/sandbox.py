"""`trialog worker sandbox`: serve `sandbox.requests` from Kafka until stopped (SIGINT or SIGTERM).

`register(subparsers)` adds the `sandbox` command to the subparsers of a `worker` command group (other
workers add theirs beside it). Every worker of a run must read the same object store (`--objects`): a
snapshot taken on one is restored on another from there. Each worker process keeps its own record of
executed steps (`--state`, a RocksDB folder). No Docker engine: it exits at once with what to run; no
Kafka yet: it waits for the broker.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ops.cli import kit
from ops.cli.workers.cleanup import add_cleanup, cleanup
from sandbox_agent.defaults import (
    DEFAULT_EPISODE_STORE_QUOTA,
    DEFAULT_MAX_STEPS_KEPT,
    DEFAULT_POOL_IDLE_S,
    DEFAULT_STEPS_KEPT_S,
)

RUNTIME_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def register(subparsers: kit.Subparsers) -> None:
    text = "serve sandbox.requests from Kafka: run each step in a warm sandbox, snapshot, answer StepExecuted"
    command = kit.command(
        subparsers,
        "sandbox",
        text,
        handler=_cmd_worker_sandbox,
        examples=(
            "trialog worker sandbox --run RUN",
            "trialog worker sandbox --run RUN --pool 4 --max-episodes 16 --objects /shared/objects",
            "trialog worker sandbox --run RUN --objects s3://trialog/RUN",
            "trialog worker sandbox --run RUN --runtime crun",
        ),
    )
    kit.add_bootstrap(command)
    kit.add_run(command)
    kit.add_group(command, "sandbox")
    command.add_argument(
        "--pool",
        type=kit.non_negative_int,
        metavar="N",
        default=2,
        help="warm sandboxes kept per image and quotas",
    )
    command.add_argument(
        "--pool-idle",
        type=kit.positive_seconds,
        metavar="S",
        default=DEFAULT_POOL_IDLE_S,
        help="seconds without use after which an image's (and quotas') warm pool is closed",
    )
    command.add_argument(
        "--max-episodes",
        type=kit.positive_int,
        metavar="N",
        default=8,
        help="episodes holding a sandbox at once",
    )
    command.add_argument(
        "--runtime",
        type=_runtime_name,
        metavar="NAME",
        default=None,
        help="OCI runtime of the sandboxes, one the engine has registered (`TRIALOG_CRUN=1 trialog up` "
        "registers Debian's crun, which starts containers faster than runc) (default: the engine's, runc)",
    )
    kit.add_objects(command, "the object store shared by all workers of the run")
    command.add_argument(
        "--state",
        type=Path,
        metavar="DIR",
        help="this worker's RocksDB folder of executed steps (default: under TRIALOG_HOME)",
    )
    command.add_argument(
        "--steps-kept",
        type=kit.positive_int,
        metavar="N",
        default=DEFAULT_MAX_STEPS_KEPT,
        help="executed steps recorded at most (oldest dropped first; an episode's go when it ends)",
    )
    command.add_argument(
        "--steps-kept-for",
        type=kit.positive_seconds,
        metavar="S",
        default=DEFAULT_STEPS_KEPT_S,
        help="seconds an executed step stays recorded at most",
    )
    command.add_argument(
        "--episode-store-quota",
        type=kit.size,
        metavar="SIZE",
        default=kit.size_text(DEFAULT_EPISODE_STORE_QUOTA),
        help="what one episode's snapshots may add to the object store (e.g. 2g); a step past it is "
        "rolled back, and its stderr says so",
    )
    kit.add_instance(command)
    add_cleanup(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def _runtime_name(text: str) -> str:
    if not RUNTIME_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not a runtime name: {text!r}")
    return text


def _cmd_worker_sandbox(args: argparse.Namespace) -> int:
    from ops.console import say
    from ops.paths import Paths
    from ops.stack import runtimes
    from ops.stores import open_objects
    from ops.telemetry.setup import start as start_telemetry
    from sandbox_agent.docker_backend import DockerBackend
    from sandbox_agent.episode_ends import EpisodeEnds
    from sandbox_agent.idempotent import Retention, RocksResultStore
    from sandbox_agent.pool import WarmPools
    from sandbox_agent.worker import ROUTE, SandboxWorker
    from schemas.origin import Origin
    from streams.kafka.request_loop import LoopSettings, RequestLoop
    from streams.telemetry import metrics

    engine = kit.require_docker()
    paths = Paths.from_env()
    bootstrap = kit.bootstrap_of(args)
    group = kit.group_of(args, "sandbox")
    home = paths.component("sandbox")
    objects = open_objects(args.objects, paths)
    client = engine.client()
    if args.runtime is not None:
        runtimes.require_registered(client, args.runtime)
    labels = {"dev.trialog.worker": args.instance}
    backend = DockerBackend(client, objects, labels=labels, runtime=args.runtime)
    pools = WarmPools(backend, args.pool, idle_s=args.pool_idle)
    start_telemetry(kit.telemetry_of(args, "trialog-sandbox"))
    metrics.metrics().gauge(metrics.POOL_SIZE, lambda: [(pools.ready(), {"state": "ready"})])
    origin = Origin.system("sandbox", args.instance)
    retention = Retention(args.steps_kept, args.steps_kept_for)
    with RocksResultStore(args.state or home / f"steps-{args.instance}", retention) as results:
        worker = SandboxWorker(
            backend, pools, results, objects, origin, args.max_episodes, args.episode_store_quota
        )
        ends = EpisodeEnds(bootstrap, args.run, worker.episode_ended)
        loop = RequestLoop(ROUTE, worker.handle, LoopSettings(bootstrap, group, args.run), origin)
        kit.worker_logging()
        say(f"sandbox worker {args.instance}: {loop.requests_topic} on {bootstrap}, group {group}")
        try:
            with cleanup(client, args), kit.worker_lifetime(args, loop.stopping, loop.health):
                ends.start()
                loop.run()
        finally:
            ends.close()
            worker.close()
            pools.close()
            client.close()
    return kit.EXIT_OK
