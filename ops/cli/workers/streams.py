"""`trialog worker streams`: own the episodes of a run (the Faust app of `streams.app`) until stopped.

`register(subparsers)` adds the `streams` command to the subparsers of a `worker` command group. Every
worker process of a run joins the same consumer group (the app id `<run>.trialog-streams`) and needs its
own `--data-dir` (RocksDB keeps one database per table partition there).
"""

from __future__ import annotations

import argparse
import os
import socket

from ops.telemetry import config as telemetry_config


def register(workers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = (
        "own episodes: check answers, append episode.events, issue requests, time out, publish trajectories"
    )
    command = workers.add_parser("streams", help=text, description=text)
    add_arguments(command)
    command.set_defaults(handler=_cmd_worker_streams)


def _cmd_worker_streams(args: argparse.Namespace) -> int:
    return run_from_args(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    parser.add_argument("--run", default="", help="the run's topic prefix (default: none)")
    parser.add_argument("--data-dir", help="this worker's RocksDB folder (default: under TRIALOG_HOME)")
    parser.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    parser.add_argument(
        "--standby-replicas", type=int, default=0, help="standby copies of each table partition (default 0)"
    )
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="the run's sampling temperature (default 1.0)"
    )
    parser.add_argument(
        "--top-p", type=float, default=1.0, help="the run's nucleus sampling mass (default 1.0)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=1024, help="tokens per reply at most (default 1024)"
    )
    telemetry_config.add_arguments(parser)


def run_from_args(args: argparse.Namespace) -> int:
    from ops.telemetry.setup import start_from_args
    from schemas.requests import SamplingParams
    from streams.app import Settings, run_worker

    bootstrap = args.bootstrap
    if not bootstrap:
        from ops.stack.stack import StackConfig

        bootstrap = StackConfig.load().kafka.bootstrap
    data_dir = args.data_dir
    if not data_dir:
        from ops.paths import Paths

        data_dir = str(Paths.from_env().component("streams") / f"data-{args.instance}")
    if args.temperature < 0 or not 0 < args.top_p <= 1 or args.max_tokens < 1:
        print("trialog worker streams: need --temperature >= 0, 0 < --top-p <= 1, --max-tokens >= 1")
        return 2
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    settings = Settings(bootstrap, args.run, data_dir, args.instance, args.standby_replicas, sampling)
    if not _kafka_answers(bootstrap):
        return 1
    start_from_args(args, "trialog-streams")
    return run_worker(settings)


def _kafka_answers(bootstrap: str) -> bool:
    """Wait for Kafka before starting Faust (started during a broker restart, it would fail at once)."""
    import signal
    import threading
    from signal import SIGINT, SIGTERM

    from streams.kafka.serving import connected

    stopping = threading.Event()
    previous = {signum: signal.signal(signum, lambda *_: stopping.set()) for signum in (SIGTERM, SIGINT)}
    try:
        return connected(bootstrap, stopping, lambda line: print(line, flush=True))
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
