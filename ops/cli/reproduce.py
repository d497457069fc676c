"""`trialog reproduce EPISODE --run RUN [--json]`: re-execute a logged episode in fresh sandboxes and
compare it with its log, step by step (`ops.reproduce`).

Reads the run's `episode.events` and `tasks` topics and the object store, nothing else. The positional is
the EPISODE (the thing reproduced) and the run is `--run`, as a worker names the run it serves. With
`--bundle DIR` both come from a run bundle (`trialog bundle RUN DIR`): no Kafka, no run store, only Docker.

Exit codes: 0 reproduced (every observation, snapshot id and the reward match); 1 it diverges (the first
divergent step is named, with why); 2 it could not be reproduced (not in the log, task or snapshot
unavailable, no sandbox), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys

from ops.cli import kit
from ops.cli.run_log_args import (
    add_log_options,
    bundle_of,
    bundle_run,
    kafka_of,
    local_tasks,
    log_errors,
    objects_of,
    require_blobs,
)
from streams.errors import StackError


def register(subparsers: kit.Subparsers) -> None:
    text = "re-execute an episode's recorded actions in fresh sandboxes and compare each step with the log"
    command = kit.command(
        subparsers,
        "reproduce",
        text,
        handler=_cmd_reproduce,
        description=f"{text}: the observation (exit code, output), the snapshot id and the final reward. "
        "Exit code 0: the same; 1: it diverges (the first divergent step is named); 2: could not reproduce.",
        examples=(
            "trialog reproduce EPISODE --run RUN",
            "trialog reproduce EPISODE --run RUN --json --tasks examples/tasks",
            "trialog reproduce EPISODE --bundle /tmp/run-bundle",
        ),
    )
    command.add_argument(
        "episode", metavar="EPISODE", help="the episode's id (trialog replay RUN lists them)"
    )
    command.add_argument(
        "--run",
        type=kit.run_id,
        help="the run's id (its topic prefix; '' for none); required unless --bundle names the run",
    )
    kit.add_json(command)
    add_log_options(command, objects=True, tasks=True, bundle=True)


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from ops.reproduce import reproduce_in_sandboxes
    from ops.runlog import EVENTS, TASKS, LoggedRun, read_topics

    bundle = bundle_of(args)
    if bundle is None and args.run is None:
        raise StackError(
            "name the run with --run RUN, or a bundle with --bundle DIR", "trialog reproduce --help"
        )
    if bundle is not None:
        args.run = bundle_run(bundle, args.run)
        require_blobs(args, bundle, "a reproduction")
    else:
        bootstrap = kafka_of(args)
    kit.require_docker()  # the episode is re-executed in sandboxes: say so before reading the log
    with log_errors():
        if bundle is not None:
            records = bundle.records((EVENTS, TASKS))
        else:
            records = read_topics(bootstrap, args.run, (EVENTS, TASKS), timeout_s=args.timeout)
        run = LoggedRun.collect(records)
    episode = run.episodes.get(args.episode)
    if episode is None:
        where = f"--bundle {bundle.root}" if bundle is not None else args.run
        raise StackError(
            f"episode {args.episode} is not in run {args.run!r}",
            f"list its episodes: trialog replay {where}",
        )
    try:
        result = reproduce_in_sandboxes(
            run, episode, objects_of(args, bundle), fallback=local_tasks(args), quiet=args.json
        )
    except Exception as exc:  # a sandbox that cannot start, a snapshot missing from the store: say which
        raise StackError(
            f"cannot reproduce {args.episode}: {type(exc).__name__}: {exc}",
            "check the object store (--objects) and the task folders (--tasks)",
        ) from None
    if args.json:
        print(json.dumps({"run": args.run, **result.to_json()}, indent=2))
    else:
        print(result.table())
    if result.error:
        print(f"trialog reproduce: {result.error}", file=sys.stderr)
        return kit.EXIT_ERROR
    return kit.EXIT_OK if result.same else kit.EXIT_FOUND
