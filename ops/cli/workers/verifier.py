"""`trialog worker verifier`: serve `verify.requests` from Kafka until stopped (SIGINT or SIGTERM).

`register(subparsers)` adds the `verifier` command to a `worker` command group. Tasks come from local task
folders (`--tasks`, repeatable); final workspaces are snapshots in the object store the sandbox workers
write (`--objects`, the same folder for every worker of the run). Each request is graded in a fresh
sandbox on the stack's Docker engine.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ops.telemetry import config as telemetry_config

if TYPE_CHECKING:
    from actors.verifier.tasks import FolderTasks

VERIFIER_LABEL = "dev.trialog.verifier"


def register(workers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "serve verify.requests from Kafka: grade each final snapshot with the task's frozen tests"
    command = workers.add_parser("verifier", help=text, description=text)
    command.add_argument(
        "--tasks", type=Path, action="append", required=True, metavar="DIR",
        help="a task folder or a folder of them (repeatable)",
    )  # fmt: skip
    command.add_argument("--objects", type=Path, help="object store folder shared by all workers of the run")
    command.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    command.add_argument("--run", default="", help="the run's topic prefix (default: none)")
    command.add_argument(
        "--group", default="trialog-verifier", help="consumer group (default trialog-verifier)"
    )
    command.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    telemetry_config.add_arguments(command)
    command.set_defaults(handler=_cmd_worker_verifier)


def poll_interval_ms(tasks: FolderTasks) -> int:
    """How long one grading may keep the loop from polling: the build and the tests may each take the
    slowest task's timeout, plus sandbox start and copies; never under the default 15 minutes."""
    slowest = max((task.spec.timeout_s for task in tasks.tasks), default=0.0)
    return max(900_000, int((2 * slowest + 300) * 1000))


def _cmd_worker_verifier(args: argparse.Namespace) -> int:
    from actors.tasks.spec import TaskError
    from actors.verifier.grading import SnapshotGrader
    from actors.verifier.tasks import FolderTasks
    from actors.verifier.worker import ROUTE, VerifierWorker
    from ops.console import say
    from ops.paths import Paths
    from ops.stack import docker_engine
    from ops.stack.sandboxes import default_image
    from ops.stack.stack import StackConfig
    from ops.telemetry.setup import start_from_args
    from sandbox_agent.docker_backend import DockerBackend
    from schemas.blobs import LocalObjectStore
    from schemas.origin import Origin
    from streams.errors import StackError
    from streams.kafka.request_loop import LoopSettings, RequestLoop

    paths = Paths.from_env()
    try:
        tasks = FolderTasks(args.tasks)
    except TaskError as exc:
        raise StackError(f"trialog worker verifier: {exc}", "fix or remove that task folder") from None
    engine = docker_engine.current(paths)
    if engine is None:
        raise StackError("no Docker engine answers", "run `trialog up` first")
    bootstrap = args.bootstrap or StackConfig.load(paths).kafka.bootstrap
    objects = LocalObjectStore(args.objects or paths.objects)
    client = engine.client()
    try:
        backend = DockerBackend(client, objects, labels={VERIFIER_LABEL: args.instance})
        origin = Origin.system("verifier", args.instance)
        worker = VerifierWorker(tasks, SnapshotGrader(backend, objects, default_image()), objects, origin)
        settings = LoopSettings(bootstrap, args.group, args.run, max_poll_interval_ms=poll_interval_ms(tasks))
        loop = RequestLoop(ROUTE, worker.handle, settings, origin)

        def stop(signum: int, frame: FrameType | None) -> None:
            loop.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("kafka").setLevel(logging.WARNING)
        where = f"{loop.requests_topic} on {bootstrap}, group {args.group}"
        say(f"verifier {args.instance} ({len(tasks.ids)} tasks): {where}")
        start_from_args(args, "trialog-verifier")
        loop.run()
    finally:
        client.close()
    return 0
