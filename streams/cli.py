"""`trialog worker streams`: own the episodes of a run (the Faust app of `streams.app`) until stopped.

`register(subparsers)` adds the `streams` command to the subparsers of a `worker` command group. Every
worker process of a run joins the same consumer group (the app id `<run>.trialog-streams`) and needs its
own `--data-dir` (RocksDB keeps one database per table partition there).
"""

from __future__ import annotations

import argparse
import sys


def register(workers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from streams.worker import add_arguments

    text = (
        "own episodes: check answers, append episode.events, issue requests, time out, publish trajectories"
    )
    command = workers.add_parser("streams", help=text, description=text)
    add_arguments(command)
    command.set_defaults(handler=_cmd_worker_streams)


def _cmd_worker_streams(args: argparse.Namespace) -> int:
    from streams.worker import run_from_args

    return run_from_args(args)


def main(argv: list[str] | None = None) -> int:
    from ops.cli import run_group

    return run_group(register, "trialog worker", sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
