"""The `trialog` command line. Each subcommand is a thin shell over a module that does the work."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence

from streams.errors import StackError

BENCHMARKS = {
    "codec": "ops.bench.codec",
    "sandbox": "ops.bench.sandbox",
    "pipeline": "ops.bench.pipeline",
    "tracing": "ops.bench.tracing",
    "learner": "ops.bench.learner",
    "learning": "ops.bench.learning",
}
# Modules that add a command group with `register(subparsers)`; they import heavy modules only when run.
COMMAND_GROUPS = (
    "ops.cli.sandbox",
    "ops.cli.tasks",
    "ops.cli.model",
    "ops.cli.run",
    "ops.cli.audit",
    "ops.cli.replay",
    "ops.cli.reproduce",
    "ops.cli.report",
    "ops.cli.demo",
)
# Modules that add a worker process under `trialog worker`, the same way.
WORKER_GROUPS = (
    "ops.cli.workers.streams",
    "ops.cli.workers.sandbox",
    "ops.cli.workers.rollout",
    "ops.cli.workers.verifier",
    "ops.cli.workers.scheduler",
    "ops.cli.workers.learner",
)

Handler = Callable[[argparse.Namespace], int]


def _cmd_prepare(args: argparse.Namespace) -> int:
    from ops.stack import stack

    stack.prepare(stack.StackConfig.load())
    return 0


def _cmd_up(args: argparse.Namespace) -> int:
    from ops.stack import stack

    config = stack.StackConfig.load()
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


def _cmd_bench(args: argparse.Namespace) -> int:
    # Imported only when chosen: a benchmark may pull in heavy modules the rest of the CLI never needs.
    module = importlib.import_module(BENCHMARKS[args.bench_name])
    parser = argparse.ArgumentParser(prog=f"trialog bench {args.bench_name}", description=module.__doc__)
    module.add_arguments(parser)
    result: int = module.run(parser.parse_args(args.bench_args))
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trialog",
        description="Event-sourced reinforcement learning of LLM agents on code-verified tasks.",
        epilog="State lives under $TRIALOG_HOME (default: .trialog/ in the repo); downloads and builds "
        "are cached under $TRIALOG_CACHE (default: ~/.cache/trialog).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Handler, help_text: str) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text)
        command.set_defaults(handler=handler)
        return command

    add("prepare", _cmd_prepare, "install and build the stack's parts (Docker, images, Kafka jars, Jaeger)")
    add("up", _cmd_up, "bring up the local stack: Docker engine, sandbox images, Kafka (KRaft), Jaeger")
    add("down", _cmd_down, "stop the local stack (an external Docker engine is left running)")
    status = add("status", _cmd_status, "report each component healthy or not, with the reason")
    status.add_argument("--json", action="store_true", help="print one JSON object")

    for module_name in COMMAND_GROUPS:
        importlib.import_module(module_name).register(sub)
    worker = sub.add_parser(
        "worker", help="run one worker process (scale by running more)", description="Run one worker process."
    )
    workers = worker.add_subparsers(dest="worker_kind", required=True, metavar="KIND")
    for module_name in WORKER_GROUPS:
        importlib.import_module(module_name).register(workers)

    bench = add("bench", _cmd_bench, "run a benchmark and record its figures in BENCHMARKS.md")
    bench.add_argument("bench_name", choices=sorted(BENCHMARKS), metavar="NAME", help=", ".join(BENCHMARKS))
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="options of that benchmark (--help)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return _dispatch(build_parser().parse_args(argv))


def _dispatch(args: argparse.Namespace) -> int:
    handler: Handler = args.handler
    try:
        return handler(args)
    except StackError as exc:
        print(f"trialog {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"trialog {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
