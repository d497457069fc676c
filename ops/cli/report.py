"""`trialog report RUN --out DIR`: write DIR/report.html, a self-contained page about a run (`ops.report`).

Reads the run's `episode.events`, trajectories, `policy.versions` and `alerts` back (a run made before
alerts existed has no alerts topic: its page says so), the learner's `stats.jsonl` (its steps, one per
policy version; by default where a learner the stack started writes it) and, with `--heldout`, a demo's
`demo.json` (the held-out pass rate by version). Both files are read before Kafka is asked anything, so a
wrong path or a broken file is said at once.
Exit codes: 0 written; 2 the run could not be read or the page not written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from learner.defaults import STATS_FILE
from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of, log_errors
from streams.errors import StackError

if TYPE_CHECKING:
    from ops.report.learner_steps import HeldOut, LearnerStats
    from ops.runlog import LoggedRun

PAGE = "report.html"
# Where `trialog demo` points its learner's --checkpoint-dir (ops.demo.run `learner_command`); a learner
# started by hand writes into its own --checkpoint-dir, which --learner-stats then names.
DEFAULT_LEARNER_STATS = f"$TRIALOG_HOME/runs/RUN/learner/{STATS_FILE}"


def register(subparsers: kit.Subparsers) -> None:
    text = (
        "write a self-contained HTML report of a run: rewards, throughput, latencies, failures, staleness, "
        "the learner's steps"
    )
    command = kit.command(
        subparsers,
        "report",
        text,
        handler=_cmd_report,
        description=f"{text} and, from a demo's summary, the held-out pass rate by version. Prints the "
        "page's path. Exit code 0: written; 2: the run or a file named could not be read, or the page not "
        "written.",
        examples=(
            "trialog report RUN --out reports/RUN",
            "trialog report RUN --out /tmp/r --timeout 10",
            "trialog report RUN --out reports/RUN --heldout .trialog/demo/NAME/demo.json",
            "trialog report RUN --out reports/RUN --learner-stats ckpt/learner/stats.jsonl",
        ),
    )
    kit.add_run(command, positional=True)
    command.add_argument("--out", type=Path, required=True, metavar="DIR", help=f"where to write {PAGE}")
    command.add_argument(
        "--jaeger", metavar="URL", help="Jaeger's query URL for the trace links (default: the local stack's)"
    )
    command.add_argument(
        "--learner-stats",
        type=Path,
        metavar="PATH",
        help=f"the learner's {STATS_FILE} (one line per policy version: loss, KL, clip and gradient norm, "
        f"log-prob gap, staleness) for the Learner steps section (default: {DEFAULT_LEARNER_STATS}; "
        "the section says so when that file is not there)",
    )
    command.add_argument(
        "--heldout",
        type=Path,
        metavar="PATH",
        help="a demo's demo.json (trialog demo writes it): adds the held-out pass rate by policy version",
    )
    add_log_options(command)


def default_learner_stats(run: str) -> Path:
    """`DEFAULT_LEARNER_STATS` for `run`, made from the same paths as the learner's --checkpoint-dir (not
    created: a report only reads)."""
    from ops.paths import Paths

    return Paths.from_env().home / "runs" / run / "learner" / STATS_FILE


def learner_stats_of(args: argparse.Namespace) -> LearnerStats:
    """The learner's steps from `--learner-stats` (a `StackError` when that file is not there) or from the
    default place (none when no file is there); a `StackError` naming the line when the file is broken."""
    from ops.report.learner_steps import LearnerStats, read_stats

    given: Path | None = args.learner_stats
    path = given if given is not None else default_learner_stats(args.run)
    if given is not None and not given.is_file():
        raise StackError(
            f"--learner-stats {given}: no such file",
            f"name the {STATS_FILE} in the learner's --checkpoint-dir, or leave the option out to read "
            f"{DEFAULT_LEARNER_STATS}",
        )
    try:
        steps = read_stats(path)
    except OSError as exc:
        raise StackError(f"cannot read {path}: {exc}", "name another file with --learner-stats") from None
    except ValueError as exc:
        raise StackError(
            str(exc), "fix or remove that line, or name another file with --learner-stats"
        ) from None
    return LearnerStats(path, tuple(steps), exists=path.is_file())


def heldout_of(args: argparse.Namespace) -> HeldOut | None:
    """The demo summary `--heldout` names, read (None without the option); a `StackError` when it is not
    there or not a demo summary."""
    from ops.report.learner_steps import read_heldout

    path: Path | None = args.heldout
    if path is None:
        return None
    hint = "name the demo.json that trialog demo wrote ($TRIALOG_HOME/demo/NAME/demo.json)"
    if not path.is_file():
        raise StackError(f"--heldout {path}: no such file", hint)
    try:
        return read_heldout(path)
    except OSError as exc:
        raise StackError(f"cannot read {path}: {exc}", hint) from None
    except ValueError as exc:
        raise StackError(str(exc), hint) from None


def _jaeger(args: argparse.Namespace) -> str:
    if args.jaeger:
        return str(args.jaeger)
    from ops.stack.stack import StackConfig

    return StackConfig.load().jaeger.query_url


def write_report(
    run: LoggedRun,
    run_name: str,
    out: Path,
    query_base: str,
    *,
    alerts_read: bool = True,
    learner: LearnerStats | None = None,
    heldout: HeldOut | None = None,
) -> Path:
    from ops.report.data import gather
    from ops.report.html import render_page

    out.mkdir(parents=True, exist_ok=True)
    page = out / PAGE
    data = gather(run, run_name, alerts_read=alerts_read)
    page.write_text(render_page(data, query_base, learner=learner, heldout=heldout), encoding="utf-8")
    return page


def _cmd_report(args: argparse.Namespace) -> int:
    from ops.runlog import ALERTS, EVENTS, POLICY_VERSIONS, TRAJECTORIES, LoggedRun, read_topics
    from schemas.topics import topic_name
    from streams.kafka.topics import existing_topics

    learner, heldout = learner_stats_of(args), heldout_of(args)  # before Kafka: a bad path is said at once
    bootstrap = kafka_of(args)
    alerts_read = bool(existing_topics(bootstrap, [topic_name(args.run, ALERTS)], min(10.0, args.timeout)))
    bases = (EVENTS, *TRAJECTORIES, POLICY_VERSIONS, *((ALERTS,) if alerts_read else ()))
    with log_errors():
        run = LoggedRun.collect(read_topics(bootstrap, args.run, bases, timeout_s=args.timeout))
    try:
        page = write_report(
            run, args.run, args.out, _jaeger(args), alerts_read=alerts_read, learner=learner, heldout=heldout
        )
    except OSError as exc:
        raise StackError(f"cannot write {args.out / PAGE}: {exc}", "choose another --out folder") from None
    print(page)
    return kit.EXIT_OK
