"""The `trialog` command line. Each subcommand is a thin shell over a module that does the work."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ops.cli import (
    alerts,
    audit,
    bundle,
    config,
    demo,
    kit,
    model,
    objects,
    quarantine,
    replay,
    report,
    reproduce,
    run,
    sandbox,
    tasks,
)
from ops.cli.workers import guard, learner, rollout, scheduler, streams, verifier
from ops.cli.workers import sandbox as sandbox_worker
from schemas.blobs import ObjectStoreUnavailable
from streams.errors import StackError

# Each adds its command (group) with `register(subparsers)`; heavy modules are imported only when run.
COMMAND_GROUPS: tuple[Callable[[kit.Subparsers], None], ...] = (
    sandbox.register,
    tasks.register,
    model.register,
    run.register,
    alerts.register,
    audit.register,
    replay.register,
    reproduce.register,
    report.register,
    demo.register,
    objects.register,
    bundle.register,
    quarantine.register,
    config.register,
)
# The worker process kinds under `trialog worker`, added the same way.
WORKER_GROUPS: tuple[Callable[[kit.Subparsers], None], ...] = (
    streams.register,
    sandbox_worker.register,
    rollout.register,
    verifier.register,
    scheduler.register,
    learner.register,
    guard.register,
)

BENCHMARKS = {
    "codec": "ops.bench.codec",
    "sandbox": "ops.bench.sandbox",
    "pipeline": "ops.bench.pipeline",
    "tracing": "ops.bench.tracing",
    "learner": "ops.bench.learner",
    "learning": "ops.bench.learning",
    "grading": "ops.bench.grading",
    "guard": "ops.bench.guard",
    "process-rewards": "ops.bench.process_rewards",
    "compare": "ops.bench.compare",
}


def _cmd_prepare(args: argparse.Namespace) -> int:
    from ops.stack import stack

    stack.prepare(stack.StackConfig.load())
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    from ops.stack import stack

    config = stack.StackConfig.load()
    if args.brokers is not None:
        config = dataclasses.replace(config, kafka=dataclasses.replace(config.kafka, brokers=args.brokers))
    stack.up(config)
    return _print_status(config, as_json=False)


def _cmd_down(args: argparse.Namespace) -> int:
    from ops.stack import stack

    stack.down(stack.StackConfig.load())
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from ops.stack import stack

    return _print_status(stack.StackConfig.load(), as_json=args.json)


def _print_status(config: object, *, as_json: bool) -> int:
    from ops.stack import stack

    assert isinstance(config, stack.StackConfig)
    report = stack.status(config)
    summary = stack.status_json(report)
    if as_json:
        print(json.dumps(summary, indent=2))
    else:
        for name, health in report.items():
            mark = "healthy  " if health.healthy else "UNHEALTHY"
            where = f" [{health.endpoint}]" if health.endpoint else ""
            print(f"{name:<7} {mark} {health.detail}{where}")
    return 0 if summary["healthy"] else 1


def bench_parser(name: str) -> tuple[argparse.ArgumentParser, Any]:
    """The parser of `trialog bench NAME` and the benchmark's module. Imported only when chosen: a
    benchmark may pull in heavy modules the rest of the CLI never needs, so its options are not part of
    `trialog`'s own parser (which every `--help` builds)."""
    module = importlib.import_module(BENCHMARKS[name])
    parser = kit.new_parser(
        f"trialog bench {name}",
        module.__doc__ or name,
        examples=(f"trialog bench {name}", f"trialog bench {name} --no-record"),
    )
    module.add_arguments(parser)
    return parser, module


def _cmd_bench(args: argparse.Namespace) -> int:
    parser, module = bench_parser(args.bench_name)
    result: int = module.run(parser.parse_args(args.bench_args))
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = kit.new_parser(
        "trialog",
        "Event-sourced reinforcement learning of LLM agents on code-verified tasks. State lives under "
        "$TRIALOG_HOME (default: .trialog/ in the repo); downloads and builds are cached under "
        "$TRIALOG_CACHE (default: ~/.cache/trialog).",
        examples=(
            "trialog up",
            "trialog run start --tasks examples/tasks --episodes 8 --policy scripted --spawn",
            "trialog audit RUN --json",
        ),
    )
    parser.add_argument("--version", action="version", version=f"trialog {kit.trialog_version()}")
    config.add_option(parser)
    sub = kit.subcommands(parser, "command")

    kit.command(
        sub, "prepare",
        "install and build the stack's parts (Docker, images, Kafka jars, Jaeger, the S3 tests' SeaweedFS)",
        handler=_cmd_prepare, examples=("trialog prepare",),
    )  # fmt: skip
    up = kit.command(
        sub, "up", "bring up the local stack: Docker engine, sandbox images, Kafka (KRaft), Jaeger",
        handler=_cmd_up, examples=("trialog up", "trialog up --brokers 3"),
    )  # fmt: skip
    up.add_argument(
        "--brokers", type=kit.int_at_least(1), metavar="N",
        help="Kafka nodes (combined broker+controller, KRaft quorum) on 127.0.0.1:9092, :9094, ...; with 3 "
        "the run's topics get 3 replicas and min.insync.replicas=2 (default: $TRIALOG_KAFKA_BROKERS, else "
        "the running stack's, else 1)",
    )  # fmt: skip
    kit.command(
        sub, "down", "stop the local stack (an external Docker engine is left running)",
        handler=_cmd_down, examples=("trialog down",),
    )  # fmt: skip
    status = kit.command(
        sub, "status", "report each component healthy or not, with the reason",
        handler=_cmd_status, examples=("trialog status", "trialog status --json"),
    )  # fmt: skip
    kit.add_json(status)

    for register in COMMAND_GROUPS:
        register(sub)
    worker = kit.command(
        sub, "worker", "run one worker process (scale by running more)",
        examples=("trialog worker streams --run RUN",),
    )  # fmt: skip
    workers = kit.subcommands(worker, "worker_kind")
    for register in WORKER_GROUPS:
        register(workers)

    bench = kit.command(
        sub, "bench", "run a benchmark and record its figures in BENCHMARKS.md",
        handler=_cmd_bench, examples=("trialog bench codec", "trialog bench sandbox --help"),
    )  # fmt: skip
    bench.add_argument("bench_name", choices=sorted(BENCHMARKS), metavar="NAME", help=", ".join(BENCHMARKS))
    bench.add_argument(
        "bench_args",
        nargs=argparse.REMAINDER,
        metavar="OPTION",
        help="options of that benchmark (see its --help)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    try:  # the file's and the environment's values become the options' defaults (ops.cli.config)
        config.configure(parser, words)
    except config.ConfigError as exc:
        return kit.report_error("trialog", exc, as_json=kit.wants_json(words))
    try:
        args = parser.parse_args(words)
    except kit.UsageError as exc:
        # argparse has said it on stderr; a `--json` caller reads stdout, so it gets the same as one object.
        if kit.wants_json(words):
            print(json.dumps({"error": exc.message, "hint": f"see {exc.prog} --help"}))
        return kit.EXIT_ERROR
    args.words = tuple(words)  # what a supervisor runs again for its children (`worker learner --nproc`)
    return _dispatch(args)


def _dispatch(args: argparse.Namespace) -> int:
    """Run the chosen command; a `StackError` is its message and hint (on stdout as one JSON object when
    the command was asked for `--json`), never a traceback."""
    handler: kit.Handler = args.handler
    # Commands added with kit.command know their full name; one added otherwise, its first two words.
    words = (args.command, getattr(args, "worker_kind", None))
    prog = getattr(args, "command_prog", None) or "trialog " + " ".join(str(part) for part in words if part)
    try:
        return handler(args)
    except StackError as exc:
        return kit.report_error(prog, exc, as_json=getattr(args, "json", False))
    except ObjectStoreUnavailable as exc:  # a remote store that went away after the command checked it
        return kit.report_error(prog, StackError(exc.message, exc.hint), as_json=getattr(args, "json", False))
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return kit.EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
