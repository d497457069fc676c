"""`trialog report RUN --out DIR`: write DIR/report.html, a self-contained page about a run (`ops.report`).

Reads the run's `episode.events`, trajectories, `policy.versions` and `alerts` back (a run made before
alerts existed has no alerts topic: its page says so); nothing else.
Exit codes: 0 written; 2 the run could not be read or the page not written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of, log_errors
from streams.errors import StackError

if TYPE_CHECKING:
    from ops.runlog import LoggedRun

PAGE = "report.html"


def register(subparsers: kit.Subparsers) -> None:
    text = "write a self-contained HTML report of a run: rewards, throughput, latencies, failures, staleness"
    command = kit.command(
        subparsers,
        "report",
        text,
        handler=_cmd_report,
        description=f"{text}. Prints the page's path. Exit code 0: written; 2: the run could not be read or "
        "the page not written.",
        examples=("trialog report RUN --out reports/RUN", "trialog report RUN --out /tmp/r --timeout 10"),
    )
    kit.add_run(command, positional=True)
    command.add_argument("--out", type=Path, required=True, metavar="DIR", help=f"where to write {PAGE}")
    command.add_argument(
        "--jaeger", metavar="URL", help="Jaeger's query URL for the trace links (default: the local stack's)"
    )
    add_log_options(command)


def _jaeger(args: argparse.Namespace) -> str:
    if args.jaeger:
        return str(args.jaeger)
    from ops.stack.stack import StackConfig

    return StackConfig.load().jaeger.query_url


def write_report(
    run: LoggedRun, run_name: str, out: Path, query_base: str, *, alerts_read: bool = True
) -> Path:
    from ops.report.data import gather
    from ops.report.html import render_page

    out.mkdir(parents=True, exist_ok=True)
    page = out / PAGE
    page.write_text(render_page(gather(run, run_name, alerts_read=alerts_read), query_base), encoding="utf-8")
    return page


def _cmd_report(args: argparse.Namespace) -> int:
    from ops.runlog import ALERTS, EVENTS, POLICY_VERSIONS, TRAJECTORIES, LoggedRun, read_topics
    from schemas.topics import topic_name
    from streams.kafka.topics import existing_topics

    bootstrap = kafka_of(args)
    alerts_read = bool(existing_topics(bootstrap, [topic_name(args.run, ALERTS)], min(10.0, args.timeout)))
    bases = (EVENTS, *TRAJECTORIES, POLICY_VERSIONS, *((ALERTS,) if alerts_read else ()))
    with log_errors():
        run = LoggedRun.collect(read_topics(bootstrap, args.run, bases, timeout_s=args.timeout))
    try:
        page = write_report(run, args.run, args.out, _jaeger(args), alerts_read=alerts_read)
    except OSError as exc:
        raise StackError(f"cannot write {args.out / PAGE}: {exc}", "choose another --out folder") from None
    print(page)
    return kit.EXIT_OK
