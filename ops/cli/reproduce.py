"""`trialog reproduce EPISODE --run RUN [--json]`: re-execute a logged episode in fresh sandboxes and
compare it with its log, step by step (`ops.reproduce`).

Reads the run's `episode.events` and `tasks` topics and the object store, nothing else.

Exit codes: 0 reproduced (every observation, snapshot id and the reward match); 1 it diverges (the first
divergent step is named, with why); 2 it could not be reproduced (not in the log, task or snapshot
unavailable, no sandbox), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from ops.cli.run_log_args import add_log_options, bootstrap_of, local_tasks, objects_of
from ops.runlog import EVENTS, TASKS, LoggedRun, LogReadError, read_topics

EXIT_SAME, EXIT_DIVERGES, EXIT_ERROR = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "re-execute an episode's recorded actions in fresh sandboxes and compare each step with the log"
    command = subparsers.add_parser(
        "reproduce",
        help=text,
        description=f"{text}: the observation (exit code, output), the snapshot id and the final reward. "
        "Exit code 0: the same; 1: it diverges (the first divergent step is named); 2: could not reproduce.",
    )
    command.add_argument("episode", metavar="EPISODE", help="the episode id")
    command.add_argument("--run", required=True, help='the run prefix of the topics ("" for the bare names)')
    command.add_argument("--json", action="store_true", help="print one JSON object")
    add_log_options(command, objects=True, tasks=True)
    command.set_defaults(handler=_cmd_reproduce)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from ops.reproduce import reproduce_in_sandboxes

    try:
        records = read_topics(bootstrap_of(args), args.run, (EVENTS, TASKS), timeout_s=args.timeout)
        run = LoggedRun.collect(records)
    except LogReadError as exc:
        print(f"trialog reproduce: {exc}", file=sys.stderr)
        return EXIT_ERROR
    episode = run.episodes.get(args.episode)
    if episode is None:
        print(f"trialog reproduce: episode {args.episode} is not in run {args.run!r}", file=sys.stderr)
        return EXIT_ERROR
    try:
        result = reproduce_in_sandboxes(
            run, episode, objects_of(args), fallback=local_tasks(args), quiet=args.json
        )
    except Exception as exc:  # a sandbox that cannot start, a snapshot missing from the store: say which
        print(f"trialog reproduce: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps({"run": args.run, **result.to_json()}, indent=2))
    else:
        print(result.table())
    if result.error:
        print(f"trialog reproduce: {result.error}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_SAME if result.same else EXIT_DIVERGES
