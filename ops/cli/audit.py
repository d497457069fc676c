"""`trialog audit RUN`: read a run's topics back from the beginning and audit them (`ops.audit`).

The reading is a thin adapter: one KafkaConsumer without a group (nothing is committed), every partition of
the audited topics assigned by hand, read from the beginning up to the end offsets taken when the audit
starts (records appended meanwhile are left for the next audit). Progress goes to stderr.

With `--recheck` it also reads the run's `tasks` topic and grades every completed episode's final snapshot
again, in fresh sandboxes, with the task's frozen tests from its bundle in the object store (`ops.recheck`).

It also reads the run's control log (`run.control`, when the run has one) and lists the quarantined
completed trajectories by rule ("quarantined: N trajectories by K rules"; in --json the episode ids per
rule). A quarantine never makes the audit unhealthy.

With `--bundle DIR` it reads the run from a run bundle (`trialog bundle RUN DIR`) instead of Kafka, and its
blobs from the bundle's own store: no Kafka, no run store; `--recheck` then needs only Docker.

Exit codes: 0 healthy (no lost episode, duplicate step or broken chain) and, with --recheck, every reward
confirmed; 1 not healthy, or a reward differs or could not be graded again; 2 the audit could not run (Kafka
unreachable, the run's topics missing, a bundle that does not match its manifest, no Docker engine for
--recheck), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

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
from ops.log_defaults import DEFAULT_STALE_AFTER_S
from streams.errors import StackError

if TYPE_CHECKING:  # ops.audit and ops.runlog load the codecs: only when the command runs
    from actors.tasks.reward_config import RewardConfig
    from ops.audit import LogRecord
    from ops.recheck import RecheckReport
    from ops.run_bundle import Bundle
    from ops.runlog import LoggedRun


def register(subparsers: kit.Subparsers) -> None:
    """Add the top-level `audit` command to the `trialog` parser."""
    text = "read a run's topics back and check its episodes: outcomes, duplicates, hash chains, retries"
    command = kit.command(
        subparsers,
        "audit",
        text,
        handler=_cmd_audit,
        description=f"{text}. Exit code 0: healthy (no lost episode, duplicate step or broken chain); "
        "1: not healthy; 2: the run could not be read.",
        examples=(
            "trialog audit RUN",
            "trialog audit RUN --json --timeout 10",
            "trialog audit RUN --recheck --tasks examples/tasks",
            "trialog audit --bundle /tmp/run-bundle --recheck",
        ),
    )
    command.add_argument(
        "run",
        metavar="RUN",
        nargs="?",
        type=kit.run_id,
        help="the run's id (its topic prefix); left out with --bundle, which holds one run",
    )
    kit.add_json(command)
    command.add_argument(
        "--stale-after",
        type=kit.positive_seconds,
        default=DEFAULT_STALE_AFTER_S,
        metavar="S",
        help="an unended episode silent for longer than S seconds before the run's newest record is lost",
    )
    command.add_argument(
        "--recheck",
        action="store_true",
        help="also grade every completed episode's final snapshot again in a fresh sandbox and report "
        "every recorded reward that differs (exit code 1 when one does or cannot be graded)",
    )
    command.add_argument(
        "--reward-config", type=Path, metavar="FILE",
        help="with --recheck: compose rewards again with this reward configuration, the one the run's "
        "verifier used (default: the brief's rule); each component is measured again and compared",
    )  # fmt: skip
    add_log_options(command, objects=True, tasks=True, bundle=True)


def _cmd_audit(args: argparse.Namespace) -> int:
    from ops.audit import Auditor
    from ops.runlog import TASKS, LoggedRun
    from schemas.codec import default_codec

    bundle = bundle_of(args)
    if bundle is None and args.run is None:
        raise StackError("name the RUN to audit, or a bundle with --bundle DIR", "see trialog audit --help")
    if bundle is not None:
        args.run = bundle_run(bundle, args.run)
        source = f"bundle {bundle.root}"
        if args.recheck:
            require_blobs(args, bundle, "--recheck")
    else:
        source = kafka_of(args)
    if args.reward_config is not None and not args.recheck:
        raise StackError("--reward-config is for --recheck", "add --recheck, or leave --reward-config out")
    reward = kit.reward_config_of(args.reward_config)  # a bad file fails before a log is read
    if args.recheck:
        kit.require_docker()  # before reading a long log, not after
    progress = Progress(sys.stderr)
    logged = LoggedRun()
    codec = default_codec()
    extra_topics = (TASKS,) if args.recheck else ()
    try:
        with log_errors():
            # Streamed: only the episode events' bytes are kept (for the chains), not the requests'
            # histories; a recheck also keeps the decoded events, trajectories and tasks.
            if bundle is not None:
                records = read_bundle(bundle, progress=progress.reading, extra=extra_topics)
            else:
                records = read_run(
                    source, args.run, timeout_s=args.timeout, progress=progress.reading, extra=extra_topics
                )
            auditor = Auditor(args.stale_after, codec)
            for record in records:
                if args.recheck:
                    logged.add(record, codec)
                if record.topic != TASKS:
                    auditor.add(record)
            report = auditor.report()
    finally:
        progress.done()
    rechecked = _recheck(args, logged, bundle, reward) if args.recheck else None
    if args.json:
        extra = {"recheck": rechecked.to_json()} if rechecked is not None else {}
        print(json.dumps({"run": args.run, **report.to_json(), **extra}, indent=2))
    else:
        print(f"run {args.run or '(default)'} {'from' if bundle is not None else 'on'} {source}")
        print(report.table())
        if rechecked is not None:
            print(rechecked.table())
    if rechecked is not None and not rechecked.ok:
        return kit.EXIT_FOUND
    return report.exit_code


def _recheck(
    args: argparse.Namespace, logged: LoggedRun, bundle: Bundle | None, reward: RewardConfig
) -> RecheckReport:
    from ops.recheck import recheck_in_sandboxes

    objects = objects_of(args, bundle)
    return recheck_in_sandboxes(logged, objects, fallback=local_tasks(args), quiet=args.json, reward=reward)


class Progress:
    """`audit: 1234/5678 records` on stderr, at most twice a second (overwritten in place on a terminal)."""

    def __init__(self, stream: TextIO, interval_s: float = 0.5) -> None:
        self.stream = stream
        self.interval_s = interval_s
        self._last = 0.0
        self._shown = False
        self._tty = stream.isatty()

    def reading(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s and done < total:
            return
        self._last = now
        line = f"audit: read {done}/{total} records"
        if self._tty:
            self.stream.write(f"\r{line}")
        else:
            self.stream.write(f"{line}\n")
        self.stream.flush()
        self._shown = True

    def done(self) -> None:
        if self._shown and self._tty:
            self.stream.write("\n")
            self.stream.flush()


def read_bundle(
    bundle: Bundle, *, progress: Callable[[int, int], None] | None = None, extra: Sequence[str] = ()
) -> Iterator[LogRecord]:
    """`read_run` from a run bundle: the audited topics' records (and `extra` ones'), topic after topic,
    then `run.control`'s (none in a bundle of a run older than that topic). Raises
    `ops.run_bundle.BundleError` when the bundle lacks one of the others or a file cannot be read."""
    from itertools import chain

    from ops.audit import AUDITED_TOPICS, CONTROL

    bases = (*AUDITED_TOPICS, *extra)
    total = bundle.count((*bases, CONTROL))
    records = chain(bundle.records(bases), bundle.records([CONTROL], require=False))
    for done, record in enumerate(records, start=1):
        yield record
        if progress is not None:
            progress(done, total)


def read_run(
    bootstrap: str,
    run: str,
    *,
    timeout_s: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
    extra: Sequence[str] = (),
) -> Iterator[LogRecord]:
    """Every record of the run's audited topics (and of `extra` ones), from the beginning to the end offsets
    at the start, each partition in offset order, then those of its `run.control` (none for a run older than
    that topic). Raises `ops.runlog.LogReadError` when Kafka cannot be reached or a topic is missing."""
    from ops.audit import AUDITED_TOPICS
    from ops.guard_log import read_control_records
    from ops.runlog import read_topics

    yield from read_topics(bootstrap, run, (*AUDITED_TOPICS, *extra), timeout_s=timeout_s, progress=progress)
    yield from read_control_records(bootstrap, run, timeout_s)
