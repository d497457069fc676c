"""`trialog replay RUN [--episode E] [--from TIME] [--json]`: a run's episodes, step by step, from its log.

Reads `episode.events` back (from the beginning, or from the first record at or after TIME on each
partition, found with `offsets_for_times`) and prints each episode's timeline (`ops.replay`).

Exit codes: 0 printed; 1 an episode asked for is not in the log read; 2 the run could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys

from ops.cli.run_log_args import add_log_options, bootstrap_of
from ops.replay import DEFAULT_OUTPUT_CHARS, build_timeline, parse_time, render
from ops.runlog import EVENTS, LoggedRun, LogReadError, read_topics

EXIT_OK, EXIT_NOT_FOUND, EXIT_ERROR = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "print a run's episode timelines from its log: actions, observations, snapshots, rewards, timing"
    command = subparsers.add_parser("replay", help=text, description=f"{text}.")
    command.add_argument("run", metavar="RUN", help='the run prefix of the topics ("" for the bare names)')
    command.add_argument(
        "--episode", action="append", metavar="E", help="only this episode (repeat for more)"
    )
    command.add_argument(
        "--from",
        dest="since",
        metavar="TIME",
        help="read from this time on (ISO 8601, UTC unless it says otherwise, or epoch seconds)",
    )
    command.add_argument(
        "--output-chars",
        type=int,
        default=DEFAULT_OUTPUT_CHARS,
        metavar="N",
        help=f"show at most N characters of each output stream (default {DEFAULT_OUTPUT_CHARS})",
    )
    command.add_argument("--json", action="store_true", help="print one JSON object")
    add_log_options(command)
    command.set_defaults(handler=_cmd_replay)


def _cmd_replay(args: argparse.Namespace) -> int:
    try:
        since_ms = parse_time(args.since) if args.since else None
    except ValueError as exc:
        print(f"trialog replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    bootstrap = bootstrap_of(args)
    try:
        run = LoggedRun.collect(
            read_topics(bootstrap, args.run, (EVENTS,), timeout_s=args.timeout, since_ms=since_ms)
        )
    except LogReadError as exc:
        print(f"trialog replay: {exc}", file=sys.stderr)
        return EXIT_ERROR
    wanted = args.episode or sorted(run.episodes, key=lambda e: (run.episodes[e].first_us, e))
    missing = [episode for episode in wanted if episode not in run.episodes]
    timelines = [
        build_timeline(e, [logged.event for logged in run.episodes[e].events], args.output_chars)
        for e in wanted
        if e in run.episodes
    ]
    if args.json:
        out = {
            "run": args.run,
            "from": args.since,
            "episodes": [timeline.to_json() for timeline in timelines],
            "missing": missing,
        }
        print(json.dumps(out, indent=2))
    else:
        print("\n\n".join(render(timeline) for timeline in timelines) or "no episode events in the log read")
    for episode in missing:
        print(f"trialog replay: episode {episode} is not in the log read", file=sys.stderr)
    return EXIT_NOT_FOUND if missing else EXIT_OK
