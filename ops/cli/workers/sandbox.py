"""`trialog worker sandbox`: serve `sandbox.requests` from Kafka until stopped (SIGINT or SIGTERM).

`register(subparsers)` adds the `sandbox` command to the subparsers of a `worker` command group (other
workers add theirs beside it). Every worker of a run must read the same object store (`--objects`): a
snapshot taken on one is restored on another from there. Each worker process keeps its own record of
executed steps (`--state`, a RocksDB folder).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
from pathlib import Path
from types import FrameType

from ops.telemetry import config as telemetry_config


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "serve sandbox.requests from Kafka: run each step in a warm sandbox, snapshot, answer StepExecuted"
    command = subparsers.add_parser("sandbox", help=text, description=text)
    command.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    command.add_argument("--run", default="", help="the run's topic prefix (default: none)")
    command.add_argument(
        "--group", default="trialog-sandbox", help="consumer group (default trialog-sandbox)"
    )
    command.add_argument("--pool", type=int, default=2, help="warm sandboxes kept per image and quotas")
    command.add_argument("--max-episodes", type=int, default=8, help="episodes holding a sandbox at once")
    command.add_argument("--objects", type=Path, help="object store folder shared by all workers of the run")
    command.add_argument("--state", type=Path, help="this worker's RocksDB folder of executed steps")
    command.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    telemetry_config.add_arguments(command)
    command.set_defaults(handler=_cmd_worker_sandbox)


def _cmd_worker_sandbox(args: argparse.Namespace) -> int:
    from ops.console import say
    from ops.paths import Paths
    from ops.stack import docker_engine
    from ops.stack.stack import StackConfig
    from ops.telemetry.setup import start_from_args
    from sandbox_agent.docker_backend import DockerBackend
    from sandbox_agent.idempotent import RocksResultStore
    from sandbox_agent.pool import WarmPools
    from sandbox_agent.worker import ROUTE, SandboxWorker
    from schemas.blobs import LocalObjectStore
    from schemas.origin import Origin
    from streams.errors import StackError
    from streams.kafka.request_loop import LoopSettings, RequestLoop
    from streams.telemetry import metrics

    paths = Paths.from_env()
    engine = docker_engine.current(paths)
    if engine is None:
        raise StackError("no Docker engine answers", "run `trialog up` first")
    bootstrap = args.bootstrap or StackConfig.load(paths).kafka.bootstrap
    home = paths.component("sandbox")
    objects = LocalObjectStore(args.objects or paths.objects)
    client = engine.client()
    backend = DockerBackend(client, objects, labels={"dev.trialog.worker": args.instance})
    pools = WarmPools(backend, args.pool)
    start_from_args(args, "trialog-sandbox")
    metrics.metrics().gauge(metrics.POOL_SIZE, lambda: [(pools.ready(), {"state": "ready"})])
    origin = Origin.system("sandbox", args.instance)
    with RocksResultStore(args.state or home / f"steps-{args.instance}") as results:
        worker = SandboxWorker(backend, pools, results, objects, origin, args.max_episodes)
        loop = RequestLoop(ROUTE, worker.handle, LoopSettings(bootstrap, args.group, args.run), origin)

        def stop(signum: int, frame: FrameType | None) -> None:
            loop.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        say(f"sandbox worker {args.instance}: {loop.requests_topic} on {bootstrap}, group {args.group}")
        try:
            loop.run()
        finally:
            worker.close()
            pools.close()
            client.close()
    return 0
