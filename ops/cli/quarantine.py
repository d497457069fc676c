"""`trialog quarantine RUN`: quarantine a run's trajectories by hand, by the version that graded them or by
when they were graded. It reads the run's `trajectories.completed` (and `run.control`, to say which are
already quarantined), lists what the rule matches, and unless `--dry-run` writes one
`TrajectoriesQuarantined` on `<run>.run.control` (acks=all, waited) with the rule and the matched episode
ids. Nothing is deleted: the learner skips what a rule matches (and what the rule will match later), the
audit lists them.

Every value is checked before Kafka is touched; a version prefix is resolved against the versions the run's
trajectories name (unknown or ambiguous: refused, with the candidates).
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from ops.cli import kit
from ops.cli.run_log_args import add_log_options, kafka_of, log_errors
from ops.console import say
from streams.errors import StackError

COMPONENTS = ("verifier", "image", "tests", "reward_config", "task", "version")  # ops.guard_log.COMPONENTS


def register(subparsers: kit.Subparsers) -> None:
    text = "quarantine a run's trajectories graded by a faulty version, or in a time window (nothing deleted)"
    command = kit.command(
        subparsers,
        "quarantine",
        text,
        handler=_cmd_quarantine,
        description=f"{text}. Lists the trajectories the rule matches and writes the rule on the run's "
        "run.control unless --dry-run; the learner never trains on what it matches.",
        examples=(
            "trialog quarantine RUN --version 3f9a1c2e --dry-run",
            "trialog quarantine RUN --version 3f9a1c2e --component image --reason 'image rebuilt'",
            "trialog quarantine RUN --since=-2h --all --reason 'canary c7 failed'",
            "trialog quarantine RUN --since 2025-01-31T12:00:00Z --until 2025-01-31T14:00:00Z --all --json",
        ),
    )
    kit.add_run(command, positional=True)
    add = command.add_argument
    add("--version", metavar="V", help="the faulty version: a unique prefix (8+ hex digits) of one the run's "
        "trajectories name")  # fmt: skip
    add("--component", choices=COMPONENTS, default="version",
        help="which of a grade's versions --version names (version: any of them)")  # fmt: skip
    add("--since", type=_time, metavar="TIME",
        help="only grades at or after TIME: ISO-8601 with a zone (2025-01-31T12:00:00Z), or relative: "
        "--since=-30m, -2h, -1d (with '=': a bare -2h reads as an option)")  # fmt: skip
    add("--until", type=_time, metavar="TIME", help="only grades before TIME (same forms as --since)")
    add(
        "--all", action="store_true", help="every trajectory graded in the --since window, whatever graded it"
    )
    add("--reason", default="", metavar="TEXT", help="why, kept with the rule in the log")
    add("--dry-run", action="store_true", help="list what the rule matches; write nothing")
    kit.add_json(command)
    add_log_options(command)


def _time(text: str) -> int:
    from ops.guard_log import parse_time

    try:
        return parse_time(text, int(time.time() * 1_000_000))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check(args: argparse.Namespace) -> None:
    """The combination of options, checked before any service is touched (a `StackError` that says what
    to give)."""
    from ops.guard_log import check_prefix

    hint = "see trialog quarantine --help"
    if args.version is None and not args.all:
        raise StackError("name what to quarantine: --version V, or --since TIME --all", hint)
    if args.version is not None and args.all:
        raise StackError("--all quarantines every grade in the window: give it without --version", hint)
    if args.all and args.since is None:
        raise StackError("--all needs a time window: --since TIME [--until TIME]", hint)
    if args.all and args.component != "version":
        raise StackError("--all matches every grade: --component does not apply", hint)
    if args.since is not None and args.until is not None and args.until <= args.since:
        raise StackError("--until must be after --since", hint)
    if args.version is not None:
        try:
            check_prefix(args.version, args.component)
        except ValueError as exc:
            raise StackError(str(exc), hint) from None


def _cmd_quarantine(args: argparse.Namespace) -> int:
    check(args)
    bootstrap = kafka_of(args)
    from ops.audit import rule_json
    from ops.guard_log import (
        ControlWriter,
        GuardError,
        RuleSpec,
        matched,
        operator_meta,
        read_completed,
        read_control,
        resolve_version,
        rows_table,
        seen_versions,
        trajectory_row,
        with_episodes,
    )
    from schemas.run_control import ANY

    with log_errors():
        trajectories = read_completed(bootstrap, args.run, args.timeout)
        control = read_control(bootstrap, args.run, args.timeout)
    if args.all:
        spec = RuleSpec(ANY, "", args.since, args.until, args.reason)
    else:
        try:
            value = resolve_version(args.version, args.component, seen_versions(trajectories, args.component))
        except GuardError as exc:
            raise StackError(
                str(exc), "check the version (trialog audit RUN --json lists the grades)"
            ) from None
        spec = RuleSpec(args.component, value, args.since or 0, args.until, args.reason)
    draft = spec.draft(args.run, operator_meta(int(time.time() * 1_000_000)), uuid.uuid4().hex[:12])
    found = matched(draft, sorted(trajectories, key=lambda t: (t.graded_at_us, t.meta.episode_id)))
    rule = with_episodes(draft, found)
    rows = [trajectory_row(t, control) for t in found]
    written = False
    if not args.dry_run:
        writer = ControlWriter(bootstrap, args.run)
        try:
            writer.write(rule)
        except Exception as exc:  # kafka-python's errors: the rule is not in the log
            raise StackError(
                f"could not write the rule on {writer.topic}: {exc!r}", "check the stack: trialog status"
            ) from None
        finally:
            writer.close()
        written = True
    if args.json:
        print(json.dumps({"run": args.run, "rule": rule_json(rule), "dry_run": args.dry_run,
                          "written": written, "matched": rows}, indent=2))  # fmt: skip
    else:
        what = "would quarantine" if args.dry_run else "quarantined"
        print(f"run {args.run}: {what} {len(rows)} of {len(trajectories)} completed trajectories "
              f"(rule {rule.rule_id}: {rule.component} {rule.value[:19] or 'any'})")  # fmt: skip
        if rows:
            print(rows_table(rows))
        if args.dry_run:
            say("dry run: nothing written (run again without --dry-run to write the rule)")
    return kit.EXIT_OK
