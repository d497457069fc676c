"""`trialog tasks review`: people accept or reject a sample of a task set before it is published.

Each sampled task is shown (instruction, the diff that made it, the failing tests and their errors, the
mutation) and decided at the terminal, or, without one, from a decisions file. The decisions become
`TaskReviewed` records on the run's `tasks` topic; `trialog tasks publish` and `trialog run start` never
publish a rejected task version, and publish an accepted one saying so. Exit codes: 0 reviews recorded (or
none left to review), 2 could not (bad input, no terminal and no decisions file, no Kafka), 130 interrupted.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli import kit
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.tasks.review import Decision
    from actors.tasks.spec import Task
    from schemas.publications import TaskReviewed

PROMPT = "accept / reject / skip / quit [a/r/s/q]: "
PROG = "trialog tasks review"


class Quit(Exception):
    """The reviewer stopped: what was decided before is still recorded."""


def add_review(commands: kit.Subparsers) -> None:
    review = kit.command(
        commands,
        "review",
        "accept or reject a sample of tasks; a rejected task is never published",
        description="Show N tasks drawn by --seed from the task set (tasks already reviewed at their "
        "current version are left out unless --again): the instruction, the diff that made the task, the "
        "failing tests and their errors, the mutation. Each decision (accept, or reject with a note) is "
        "recorded as a TaskReviewed event on the run's `tasks` topic; publishing refuses a rejected task "
        "version and marks an accepted one. At a terminal you are asked task by task; without one, "
        "--decisions FILE (JSON or TOML: ID = {decision = 'accept'|'reject', note = '...'}) must cover "
        "every sampled task, and is checked whole before anything is recorded.",
        handler=_cmd_review,
        examples=(
            "trialog tasks review /tmp/synthesized --sample 20 --seed 7 --run my-run",
            "trialog tasks review /tmp/synthesized --sample 5 --decisions decisions.json --json",
        ),
    )
    review.add_argument(
        "dirs", type=kit.existing_dir, nargs="+", metavar="DIR", help="task folders or folders of them"
    )
    review.add_argument(
        "--sample", type=kit.positive_int, required=True, metavar="N", help="how many tasks to review"
    )
    review.add_argument("--seed", type=kit.non_negative_int, default=0, metavar="S", help="draws the sample")
    review.add_argument(
        "--reviewer",
        type=_reviewer,
        default=None,
        metavar="NAME",
        help="who reviews (default: the login name)",
    )
    review.add_argument(
        "--decisions",
        type=kit.existing_file,
        metavar="FILE",
        help="decide from this JSON or TOML file instead of asking (required without a terminal)",
    )
    review.add_argument(
        "--again", action="store_true", help="also sample tasks already reviewed at their current version"
    )
    kit.add_run(review)
    kit.add_bootstrap(review)
    kit.add_json(review, "print one JSON document: the sample and the decisions recorded")


def _reviewer(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text.strip()


def _cmd_review(args: argparse.Namespace) -> int:
    from actors.tasks.publish import read_reviews, record_reviews
    from actors.tasks.review import DecisionsError, load_decisions, missing_decisions, sample_tasks
    from actors.tasks.spec import survey_tasks
    from ops.cli.grading import report_malformed

    survey = survey_tasks(args.dirs)
    if not survey.ok:
        return report_malformed(PROG, survey.problems, as_json=args.json)
    interactive = args.decisions is None
    if interactive and not sys.stdin.isatty():
        hint = "give the decisions with --decisions FILE (see trialog tasks review --help)"
        return kit.report_error(PROG, StackError("no terminal to ask at", hint), as_json=args.json)
    decisions: dict[str, Decision] = {}
    if args.decisions is not None:
        try:
            decisions = load_decisions(args.decisions, [task.id for task in survey.tasks])
        except DecisionsError as exc:
            return _report_problems(exc.problems, args.decisions, as_json=args.json)
    reviewer = args.reviewer or _login()
    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    try:
        sample = sample_tasks(
            survey.tasks, args.sample, args.seed, read_reviews(bootstrap, args.run), again=args.again
        )
    except StackError as exc:
        return kit.report_error(PROG, exc, as_json=args.json)
    if sample.already_reviewed:
        count = len(sample.already_reviewed)
        print(f"{count} tasks already reviewed at their current version are left out (--again includes them)",
              file=sys.stderr)  # fmt: skip
    missing = missing_decisions(sample, decisions) if not interactive else []
    if missing:
        problems = [f"{task_id}: sampled, but the file has no decision for it" for task_id in missing]
        return _report_problems(problems, args.decisions, as_json=args.json)
    show = (lambda text: print(text, file=sys.stderr)) if args.json else print
    made, skipped = _decide(sample.tasks, decisions if not interactive else None, reviewer, show)
    try:
        if made:
            record_reviews(made, bootstrap, run=args.run)
    except StackError as exc:
        return kit.report_error(PROG, exc, as_json=args.json)
    _report(args, sample.tasks, made, skipped, sample.already_reviewed)
    return kit.EXIT_OK


def _decide(
    tasks: tuple[Task, ...],
    decisions: dict[str, Decision] | None,
    reviewer: str,
    show: Callable[[str], None],
    ask: Callable[[str], str] = input,
) -> tuple[list[TaskReviewed], list[str]]:
    """Each task shown, then decided from `decisions` or, when None, by asking; the records to write and
    the ids skipped (a quit skips the rest)."""
    import socket

    from actors.tasks.review import review_record, review_text
    from schemas.origin import Origin

    origin = Origin.system("task-review", socket.gethostname())
    made: list[TaskReviewed] = []
    skipped: list[str] = []
    for index, task in enumerate(tasks):
        show(f"[{index + 1}/{len(tasks)}] " + review_text(task))
        try:
            decision = decisions[task.id] if decisions is not None else ask_decision(ask, show)
        except Quit:
            skipped += [t.id for t in tasks[index:]]
            break
        if decision is None:
            skipped.append(task.id)
            continue
        made.append(review_record(task, decision, reviewer, origin))
        show(f"{task.id}: {decision.decision.value}" + (f" ({decision.note})" if decision.note else ""))
    return made, skipped


def ask_decision(ask: Callable[[str], str], show: Callable[[str], None]) -> Decision | None:
    """Ask until the answer is a/r/s/q (and a note, required for a rejection); None for skip, `Quit` for
    quit or the end of input."""
    from actors.tasks.review import Decision
    from schemas.publications import ReviewDecision

    while True:
        answer = _read(ask, PROMPT).strip().lower()
        if answer in ("q", "quit"):
            raise Quit
        if answer in ("s", "skip"):
            return None
        if answer in ("a", "accept"):
            return Decision(ReviewDecision.ACCEPTED, _read(ask, "note (optional): ").strip())
        if answer in ("r", "reject"):
            while not (note := _read(ask, "note (why it is rejected, required): ").strip()):
                show("a rejection needs a note")
            return Decision(ReviewDecision.REJECTED, note)
        show(f"answer a, r, s or q (not {answer!r})")


def _read(ask: Callable[[str], str], prompt: str) -> str:
    try:
        return ask(prompt)
    except EOFError:
        raise Quit from None


def _login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container): the reviewer must be named
        return "unknown"


def _report_problems(problems: tuple[str, ...] | list[str], path: Path, *, as_json: bool) -> int:
    message = f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {path}; nothing was recorded"
    hint = "fix the decisions file and run the command again"
    if as_json:
        print(json.dumps({"error": message, "hint": hint, "problems": list(problems)}, indent=2))
    for problem in problems:
        print(f"{PROG}: {path}: {problem}", file=sys.stderr)
    print(f"{PROG}: {message} ({hint})", file=sys.stderr)
    return kit.EXIT_ERROR


def _report(
    args: argparse.Namespace,
    sampled: tuple[Task, ...],
    made: list[TaskReviewed],
    skipped: list[str],
    already: tuple[str, ...],
) -> None:
    if args.json:
        document = {
            "run": args.run,
            "sampled": [task.id for task in sampled],
            "already_reviewed": list(already),
            "reviews": [_review_json(review) for review in made],
            "skipped": skipped,
        }
        print(json.dumps(document, indent=2))
        return
    from schemas.topics import TASKS

    accepted = sum(r.decision.value == "accepted" for r in made)
    print(f"recorded {len(made)} reviews ({accepted} accepted, {len(made) - accepted} rejected) on "
          f"{TASKS.of(args.run)}; {len(skipped)} skipped")  # fmt: skip


def _review_json(review: TaskReviewed) -> dict[str, str]:
    return {
        "task": review.task_id,
        "version": review.task_version,
        "decision": review.decision.value,
        "reviewer": review.reviewer,
        "note": review.note,
    }
