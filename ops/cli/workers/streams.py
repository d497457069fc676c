"""`trialog worker streams`: own the episodes of a run (the Faust app of `streams.app`) until stopped.

`register(subparsers)` adds the `streams` command to the subparsers of a `worker` command group. Every
worker process of a run joins the same consumer group (the app id `<run>.trialog-streams`) and needs its
own `--data-dir` (RocksDB keeps one database per table partition there). It waits for Kafka before starting
Faust (started during a broker restart, Faust would fail at once).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ops.cli import kit

if TYPE_CHECKING:
    from streams.step_grading import StepGrading


def register(workers: kit.Subparsers) -> None:
    text = (
        "own episodes: check answers, append episode.events, issue requests, time out, publish trajectories"
    )
    command = kit.command(
        workers,
        "streams",
        text,
        handler=_cmd_worker_streams,
        examples=(
            "trialog worker streams --run RUN",
            "trialog worker streams --run RUN --data-dir /tmp/streams-2 --instance streams-2",
        ),
    )
    kit.add_bootstrap(command)
    kit.add_run(command)
    command.add_argument(
        "--data-dir", metavar="DIR", help="this worker's RocksDB folder (default: under TRIALOG_HOME)"
    )
    kit.add_instance(command)
    command.add_argument(
        "--standby-replicas",
        type=kit.non_negative_int,
        metavar="N",
        default=0,
        help="standby copies of each table partition",
    )
    command.add_argument(
        "--temperature",
        type=kit.non_negative_float,
        metavar="X",
        default=1.0,
        help="the run's sampling temperature",
    )
    command.add_argument(
        "--top-p", type=kit.fraction, metavar="P", default=1.0, help="the run's nucleus sampling mass"
    )
    command.add_argument(
        "--max-tokens", type=kit.positive_int, metavar="N", default=1024, help="tokens per reply at most"
    )
    command.add_argument(
        "--grade-steps", type=_step_grading, metavar="MODE", default="off",
        help="grade intermediate workspaces beside the episodes, never waited for (process rewards, "
        "progress.results): off, every, every:K (after every K-th step) or changed (after each step "
        "that changed the workspace); the untouched workspace is graded too when on",
    )  # fmt: skip
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def _step_grading(text: str) -> StepGrading:
    from streams.step_grading import StepGrading

    try:
        return StepGrading.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_worker_streams(args: argparse.Namespace) -> int:
    from ops.console import say
    from ops.paths import Paths
    from ops.telemetry.setup import start as start_telemetry
    from schemas.requests import SamplingParams
    from streams.app import Settings, run_worker
    from streams.kafka.serving import connected
    from streams.kafka.topics import await_run_topics, cluster_durability

    bootstrap = kit.bootstrap_of(args)
    data_dir = args.data_dir or str(Paths.from_env().component("streams") / f"data-{args.instance}")
    sampling = SamplingParams(temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens)
    health = kit.health_of(args)
    with kit.health_endpoints(args, health):
        with kit.graceful_stop(args, health=health) as stopping:
            health.ready("episodes", False, f"waiting for Kafka at {bootstrap}")
            if not connected(bootstrap, stopping, say):
                return kit.EXIT_INTERRUPTED  # stopped while waiting for Kafka
            health.ready("episodes", False, f"waiting for the topics of run {args.run or '(default)'}")
            if not await_run_topics(bootstrap, args.run, stopping, say):
                return kit.EXIT_INTERRUPTED
        settings = Settings(
            bootstrap,
            args.run,
            data_dir,
            args.instance,
            args.standby_replicas,
            sampling,
            args.grade_steps,
            cluster_durability(bootstrap),
        )
        start_telemetry(kit.telemetry_of(args, "trialog-streams"))
        kit.worker_logging("faust", "aiokafka")
        # Faust's worker handles SIGTERM itself from here; the grace period bounds its stop.
        return run_worker(settings, health, kit.grace_of(args))
