"""`trialog alerts RUN [--follow] [--since TIME] [--rule R] [--json]`: the alerts a run's guard raised.

Reads the run's `alerts` topic (`actors.guard.alerts` says what each rule means) from the beginning, or
from TIME on, and prints one line per alert, oldest first, then the counts by severity. `--follow` keeps
reading and prints each new alert as it is written, until interrupted (Ctrl-C / SIGTERM: exit 0).
`--json` prints one document; with `--follow`, one JSON object per line and alert instead (a stream has
no end to close a document at).

Exit codes: 0 listed (alerts or not); 2 the run's alerts could not be read (Kafka missing: the message
says what to run; the run or its alerts topic missing).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of
from streams.errors import StackError

if TYPE_CHECKING:
    from schemas.alerts import Alert

FOLLOW_POLL_S = 1.0
RULES = (  # actors.guard.alerts.Rule, spelled here so that --help does not import the engine
    "acquire_latency",
    "canary_failed",
    "consumer_lag",
    "dead_letters",
    "failure_rate",
    "learner_idle",
    "learner_stale",
    "reward_collapse",
    "reward_jump",
    "version_changed",
)
_AGO = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def register(subparsers: kit.Subparsers) -> None:
    text = "list a run's alerts (reward collapse, failures, dead letters, canaries, lag, ...)"
    command = kit.command(
        subparsers,
        "alerts",
        text,
        handler=_cmd_alerts,
        description=f"{text}, oldest first, from its alerts topic (written by the run's guard, "
        "`trialog worker guard --run RUN`). Exit code 0: listed; 2: not readable.",
        examples=(
            "trialog alerts RUN",
            "trialog alerts RUN --since 2h --rule canary_failed --rule version_changed",
            "trialog alerts RUN --follow",
            "trialog alerts RUN --follow --json",
            "trialog alerts RUN --since 2026-11-30T17:05:00Z --json",
        ),
    )
    kit.add_run(command, positional=True)
    command.add_argument(
        "--follow", action="store_true", help="keep printing new alerts as they come, until interrupted"
    )
    command.add_argument(
        "--since",
        type=a_moment,
        metavar="TIME",
        help="only alerts raised at or after TIME: ISO 8601 (UTC unless it says otherwise), epoch seconds, "
        "or a time ago such as 30m, 2h, 7d",
    )
    command.add_argument(
        "--rule",
        action="append",
        choices=RULES,
        metavar="RULE",
        help=f"only this rule's alerts (repeat for more): {', '.join(RULES)}",
    )
    kit.add_json(
        command, "print one JSON document on stdout; with --follow, one JSON object per line and alert"
    )
    add_log_options(command)


def a_moment(text: str, now_s: Callable[[], float] = time.time) -> int:
    """Milliseconds since the epoch of `text`: a time ago (`30m`, `2h`, `1.5d`, `45s`), else what
    `ops.replay.parse_time` reads (ISO 8601 or epoch seconds)."""
    ago = _AGO.fullmatch(text.strip())
    if ago is not None:
        return round((now_s() - float(ago[1]) * _UNIT_S[ago[2]]) * 1000)
    from ops.replay import parse_time

    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or a time ago such as 30m, 2h, 7d") from None


def _cmd_alerts(args: argparse.Namespace) -> int:
    from actors.guard.alerts import alert_json, alert_line, by_severity

    bootstrap = kafka_of(args)
    since_ms: int | None = args.since
    wanted = set(args.rule or ())

    def chosen(alert: Alert) -> bool:
        recent = since_ms is None or alert.meta.occurred_at_us >= since_ms * 1000
        return recent and (not wanted or alert.rule in wanted)

    batches = read_alerts(bootstrap, args.run, since_ms, args.timeout, follow=args.follow)
    if args.follow:
        for batch in batches:
            for alert in filter(chosen, batch):
                print(json.dumps(alert_json(alert)) if args.json else alert_line(alert), flush=True)
        return kit.EXIT_OK
    alerts = [alert for batch in batches for alert in batch if chosen(alert)]
    counts = by_severity(alerts)
    if args.json:
        document: dict[str, Any] = {
            "run": args.run,
            "since_ms": since_ms,
            "rules": sorted(wanted) or None,
            "count": len(alerts),
            "by_severity": counts,
            "alerts": [alert_json(alert) for alert in alerts],
        }
        print(json.dumps(document, indent=2))
        return kit.EXIT_OK
    for alert in alerts:
        print(alert_line(alert))
    shown = ", ".join(f"{severity} {count}" for severity, count in counts.items() if count)
    print(f"run {args.run or '(default)'}: {len(alerts)} alerts" + (f" ({shown})" if shown else ""))
    return kit.EXIT_OK


def read_alerts(
    bootstrap: str, run: str, since_ms: int | None, timeout_s: float, *, follow: bool = False
) -> Iterator[list[Alert]]:
    """The run's alerts in batches: what the topic holds now, then (with `follow`) what comes, a batch per
    poll, until SIGINT or SIGTERM. Reading errors are `StackError`s."""
    from kafka.errors import KafkaError

    from schemas.alerts import Alert
    from schemas.codec import DecodeError, default_codec
    from schemas.topics import ALERTS
    from streams.kafka.reader import LogReader, ReadError

    codec = default_codec()
    hint = "check the run's name (trialog run status RUN); a run made before alerts existed has none"
    try:
        reader = LogReader(
            bootstrap, [ALERTS.of(run)], since_ms=since_ms, require_topics=True, client_id="trialog-alerts",
            connect_timeout_s=min(10.0, timeout_s),
        )  # fmt: skip
    except ReadError as exc:
        raise StackError(f"run {run!r}: {exc}", hint) from None
    except KafkaError as exc:
        raise StackError(
            f"cannot read the alerts of run {run!r} on {bootstrap}: {exc!r}", kit.KAFKA_HINT
        ) from None
    try:
        with kit.stop_on_signals() as stopping:
            while True:
                batch = []
                for record in reader.to_end(timeout_s=timeout_s):
                    try:
                        value = codec.decode(record.value or b"")
                    except DecodeError:
                        continue  # not an alert this trialog can read: `trialog audit` reports those
                    if isinstance(value, Alert):
                        batch.append(value)
                yield batch
                if not follow or stopping.wait(FOLLOW_POLL_S):
                    return
    except ReadError as exc:
        raise StackError(str(exc), hint) from None
    except KafkaError as exc:
        raise StackError(f"lost Kafka at {bootstrap}: {exc!r}", kit.KAFKA_HINT) from None
    finally:
        reader.close()
