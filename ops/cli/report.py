"""`trialog report RUN --out DIR`: write DIR/report.html, a self-contained page about a run (`ops.report`).

Reads the run's `episode.events`, trajectories and `policy.versions` back; nothing else.
Exit codes: 0 written; 2 the run could not be read or the page not written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ops.cli.run_log_args import add_log_options, bootstrap_of
from ops.runlog import EVENTS, POLICY_VERSIONS, TRAJECTORIES, LoggedRun, LogReadError, read_topics

EXIT_OK, EXIT_ERROR = 0, 2
PAGE = "report.html"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "write a self-contained HTML report of a run: rewards, throughput, latencies, failures, staleness"
    command = subparsers.add_parser("report", help=text, description=f"{text}.")
    command.add_argument("run", metavar="RUN", help='the run prefix of the topics ("" for the bare names)')
    command.add_argument("--out", type=Path, required=True, metavar="DIR", help=f"where to write {PAGE}")
    command.add_argument(
        "--jaeger", metavar="URL", help="Jaeger's query URL for the trace links (default: the local stack's)"
    )
    add_log_options(command)
    command.set_defaults(handler=_cmd_report)


def _jaeger(args: argparse.Namespace) -> str:
    if args.jaeger:
        return str(args.jaeger)
    from ops.stack.stack import StackConfig

    return StackConfig.load().jaeger.query_url


def write_report(run: LoggedRun, run_name: str, out: Path, query_base: str) -> Path:
    from ops.report.data import gather
    from ops.report.html import render_page

    out.mkdir(parents=True, exist_ok=True)
    page = out / PAGE
    page.write_text(render_page(gather(run, run_name), query_base), encoding="utf-8")
    return page


def _cmd_report(args: argparse.Namespace) -> int:
    bases = (EVENTS, *TRAJECTORIES, POLICY_VERSIONS)
    try:
        run = LoggedRun.collect(read_topics(bootstrap_of(args), args.run, bases, timeout_s=args.timeout))
        page = write_report(run, args.run, args.out, _jaeger(args))
    except (LogReadError, OSError) as exc:
        print(f"trialog report: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(page)
    return EXIT_OK
