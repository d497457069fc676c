"""`trialog audit RUN`: read a run's topics back from the beginning and audit them (`ops.audit`).

The reading is a thin adapter: one KafkaConsumer without a group (nothing is committed), every partition of
the audited topics assigned by hand, read from the beginning up to the end offsets taken when the audit
starts (records appended meanwhile are left for the next audit). Progress goes to stderr.

Exit codes: 0 healthy (no lost episode, duplicate step or broken chain), 1 not healthy, 2 the audit could
not run (Kafka unreachable, the run's topics missing), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from ops.audit import AUDITED_TOPICS, DEFAULT_STALE_AFTER_S, LogRecord, audit
from ops.topics import topic_name

EXIT_OK, EXIT_UNHEALTHY, EXIT_ERROR = 0, 1, 2


class AuditError(Exception):
    """The audit could not read the run (exit code 2)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the top-level `audit` command to the `trialog` parser."""
    text = "read a run's topics back and check its episodes: outcomes, duplicates, hash chains, retries"
    command = subparsers.add_parser(
        "audit",
        help=text,
        description=f"{text}. Exit code 0: healthy (no lost episode, duplicate step or broken chain); "
        "1: not healthy; 2: the run could not be read.",
    )
    command.add_argument("run", metavar="RUN", help='the run prefix of the topics ("" for the bare names)')
    command.add_argument("--json", action="store_true", help="print one JSON object")
    command.add_argument(
        "--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers (default: the local stack's broker)"
    )
    command.add_argument(
        "--stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER_S,
        metavar="S",
        help="an unended episode silent for longer than S seconds before the run's newest record is lost "
        f"(default {DEFAULT_STALE_AFTER_S:g})",
    )
    command.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="give up when no record arrives for S seconds",
    )
    command.set_defaults(handler=_cmd_audit)


def _default_bootstrap() -> str:
    from ops.stack.stack import StackConfig

    return StackConfig.load().kafka.bootstrap


def _cmd_audit(args: argparse.Namespace) -> int:
    bootstrap = args.bootstrap or _default_bootstrap()
    progress = Progress(sys.stderr)
    try:
        # Streamed: only the episode events' bytes are kept (for the chains), not the requests' histories.
        records = read_run(bootstrap, args.run, timeout_s=args.timeout, progress=progress.reading)
        report = audit(records, stale_after_s=args.stale_after)
    except AuditError as exc:
        print(f"trialog audit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        progress.done()
    if args.json:
        print(json.dumps({"run": args.run, **report.to_json()}, indent=2))
    else:
        print(f"run {args.run or '(default)'} on {bootstrap}")
        print(report.table())
    return report.exit_code


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


def read_run(
    bootstrap: str,
    run: str,
    *,
    timeout_s: float = 60.0,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[LogRecord]:
    """Every record of the run's audited topics, from the beginning to the end offsets at the start, each
    partition in offset order. Raises `AuditError` when Kafka cannot be reached or a topic is missing."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    names = {topic_name(run, base): base for base in AUDITED_TOPICS}
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            client_id="trialog-audit",
            request_timeout_ms=30_000,
            bootstrap_timeout_ms=10_000,
        )
    except KafkaError as exc:
        raise AuditError(f"cannot reach Kafka at {bootstrap}: {exc!r}") from exc
    try:
        try:
            existing = consumer.topics()
        except KafkaError as exc:
            raise AuditError(f"cannot list the topics on {bootstrap}: {exc!r}") from exc
        missing = sorted(name for name in names if name not in existing)
        if missing:
            what = (
                "none of its topics exist" if len(missing) == len(names) else f"missing {', '.join(missing)}"
            )
            raise AuditError(f"run {run!r} on {bootstrap}: {what} (is the run name right?)")
        partitions = [
            TopicPartition(name, partition)
            for name in names
            for partition in sorted(consumer.partitions_for_topic(name) or ())
        ]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        begin: dict[Any, int] = consumer.beginning_offsets(partitions)
        end: dict[Any, int] = consumer.end_offsets(partitions)
        total = sum(end[tp] - begin[tp] for tp in partitions)
        pending = {tp for tp in partitions if end[tp] > begin[tp]}
        done = 0
        if progress is not None:
            progress(done, total)
        quiet_since = time.monotonic()
        while pending:
            batches = consumer.poll(timeout_ms=500, max_records=5_000)
            for tp, batch in batches.items():
                for message in batch:
                    if message.offset >= end[tp]:
                        continue  # appended after the audit started
                    done += 1
                    yield LogRecord(
                        names[tp.topic],
                        tp.partition,
                        message.offset,
                        message.key,
                        message.value,
                        message.timestamp,
                    )
            for tp in list(pending):
                if consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
                    consumer.pause(tp)
            if batches:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > timeout_s:
                left = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
                raise AuditError(f"no records for {timeout_s:g} s while reading {left} on {bootstrap}")
            if progress is not None:
                progress(done, total)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    from ops.cli import run_group

    return run_group(register, "trialog", ["audit", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
