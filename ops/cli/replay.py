"""`trialog replay RUN [--episode E] [--from TIME] [--json]`: a run's episodes, step by step, from its log.

Reads `episode.events` back (from the beginning, or from the first record at or after TIME on each
partition, found with `offsets_for_times`) and prints each episode's timeline (`ops.replay`). With
`--bundle DIR` it reads them from a run bundle (`trialog bundle RUN DIR`) instead of Kafka.

Exit codes: 0 printed; 1 an episode asked for is not in the log read; 2 the run could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, bundle_of, bundle_run, kafka_of, log_errors
from ops.log_defaults import DEFAULT_OUTPUT_CHARS
from streams.errors import StackError


def register(subparsers: kit.Subparsers) -> None:
    text = "print a run's episode timelines from its log: actions, observations, snapshots, rewards, timing"
    command = kit.command(
        subparsers,
        "replay",
        text,
        handler=_cmd_replay,
        description=f"{text}. Exit code 0: printed; 1: an episode asked for is not in the log; "
        "2: the run could not be read.",
        examples=(
            "trialog replay RUN",
            "trialog replay RUN --episode EPISODE --json",
            "trialog replay RUN --from 2026-11-30T17:05:00Z --output-chars 2000",
            "trialog replay --bundle /tmp/run-bundle --episode EPISODE",
        ),
    )
    command.add_argument(
        "run",
        metavar="RUN",
        nargs="?",
        type=kit.run_id,
        help="the run's id (its topic prefix); left out with --bundle, which holds one run",
    )
    command.add_argument(
        "--episode", action="append", metavar="E", help="only this episode (repeat for more; default: all)"
    )
    command.add_argument(
        "--from",
        dest="since",
        type=a_time,
        metavar="TIME",
        help="read from this time on (ISO 8601, UTC unless it says otherwise, or epoch seconds)",
    )
    command.add_argument(
        "--output-chars",
        type=kit.positive_int,
        default=DEFAULT_OUTPUT_CHARS,
        metavar="N",
        help="show at most N characters of each output stream",
    )
    kit.add_json(command)
    add_log_options(command, bundle=True)


def a_time(text: str) -> str:
    """`text` when `ops.replay.parse_time` reads it as a time (refused when parsed otherwise)."""
    from ops.replay import parse_time

    try:
        parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _cmd_replay(args: argparse.Namespace) -> int:
    from ops.replay import build_timeline, parse_time, render
    from ops.runlog import EVENTS, LoggedRun, read_topics

    since_ms = parse_time(args.since) if args.since else None
    bundle = bundle_of(args)
    if bundle is None and args.run is None:
        raise StackError("name the RUN to replay, or a bundle with --bundle DIR", "see trialog replay --help")
    with log_errors():
        if bundle is not None:
            args.run = bundle_run(bundle, args.run)
            records = bundle.records((EVENTS,), since_ms=since_ms)
        else:
            bootstrap = kafka_of(args)
            records = read_topics(bootstrap, args.run, (EVENTS,), timeout_s=args.timeout, since_ms=since_ms)
        run = LoggedRun.collect(records)
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
    return kit.EXIT_FOUND if missing else kit.EXIT_OK
