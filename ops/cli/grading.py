"""`trialog verify`, `trialog tasks validate` and `trialog tasks publish`: commands that grade in sandboxes.

Exit codes: verify 0 pass, 1 any other verdict, 2 could not grade; validate 0 all valid, 1 some not,
2 error; publish 0 all published, 1 some not valid (not published), 2 error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from actors.tasks.spec import Task, TaskError, find_tasks, load_task
from actors.tasks.validate import Admission, TaskValidation, Verifier, validate_all
from actors.tasks.verify import Verification, print_human, task_quotas, verify
from ops.paths import Paths
from ops.progress import ProgressBar
from ops.stack.images import sandbox_ref
from sandbox_agent.limits import SandboxSpec
from schemas.blobs import LocalObjectStore
from streams.errors import StackError

EXIT_OK, EXIT_FOUND, EXIT_ERROR = 0, 1, 2
VERIFY_LABEL = "dev.trialog.verify"


def register_verify(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    command = subparsers.add_parser(
        "verify",
        help="grade a final workspace with a task's frozen tests in a fresh sandbox",
        description="Grade WORKSPACE (the agent's version of TASK's repo/) with the task's hidden, frozen "
        "tests in a fresh sandbox. Reward: tampered -1.0, build failed -0.5, all pass 1.0, else "
        "passed/total - 0.2. Exit code 0: pass; 1: any other verdict; 2: could not grade.",
    )
    command.add_argument("task", type=Path, metavar="TASK", help="the task folder")
    command.add_argument("workspace", type=Path, metavar="WORKSPACE", help="the folder to grade")
    command.add_argument("--json", action="store_true", help="print one JSON object")
    command.set_defaults(handler=_cmd_verify)


def add_validate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, handler, text in (
        ("validate", _cmd_validate, "admit tasks only if solvable, not already solved, and stable"),
        ("publish", _cmd_publish, "validate tasks, then put the valid ones on the compacted `tasks` topic"),
    ):
        command = commands.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}.")
        command.add_argument(
            "dirs", type=Path, nargs="+", metavar="DIR", help="task folders or folders of them"
        )
        command.add_argument("--runs", type=int, default=3, help="runs per task (default 3)")
        command.add_argument(
            "--jobs", type=int, default=min(4, os.cpu_count() or 1), help="tasks validated at once"
        )
        command.add_argument("--json", action="store_true", help="one JSON object per task, one per line")
        if name == "publish":
            command.add_argument("--run", default="", help="run prefix of the topic (default: none)")
        command.set_defaults(handler=handler)


@contextmanager
def _sandbox_verifier() -> Iterator[Verifier]:
    from ops.stack.sandboxes import default_image, stack_backend

    with stack_backend(Paths.from_env(), labels={VERIFY_LABEL: "1"}) as backend:

        def run(task: Task, workspace: Path) -> Verification:
            spec = SandboxSpec(task.spec.image or default_image(), task_quotas(task))
            return verify(task, workspace, backend, spec)

        yield run


def _cmd_verify(args: argparse.Namespace) -> int:
    try:
        task = load_task(args.task)
        if not args.workspace.is_dir():
            raise TaskError(args.workspace, "is not a folder")
        with _sandbox_verifier() as run:
            result = run(task, args.workspace)
    except (TaskError, StackError) as exc:
        print(f"trialog verify: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(result.to_json()) if args.json else print_human(result))
    return EXIT_OK if result.grade.verdict.value == "pass" else EXIT_FOUND


def _validate(args: argparse.Namespace, command: str) -> list[TaskValidation] | None:
    if args.runs < 1:
        print(f"trialog tasks {command}: --runs must be at least 1", file=sys.stderr)
        return None
    try:
        folders = [folder for root in args.dirs for folder in find_tasks(root)]
    except TaskError as exc:
        print(f"trialog tasks {command}: {exc}", file=sys.stderr)
        return None
    label = f"validating {len(folders)} tasks x {args.runs} runs"
    with ProgressBar(len(folders), label, quiet=args.json) as progress:

        def done(result: TaskValidation) -> None:
            progress.advance(f"{result.task_id or result.path}: {result.verdict.value}")
            if args.json:
                print(json.dumps(result.to_json()), flush=True)

        try:
            with _sandbox_verifier() as run:
                results = validate_all(folders, run, runs=args.runs, jobs=args.jobs, on_done=done)
        except StackError as exc:
            print(f"trialog tasks {command}: {exc}", file=sys.stderr)
            return None
    if not args.json:
        for result in results:
            why = f"  ({'; '.join(result.reasons)})" if result.reasons else ""
            print(f"{result.verdict.value:<16} {result.task_id or result.path}{why}")
    return results


def _cmd_validate(args: argparse.Namespace) -> int:
    results = _validate(args, "validate")
    if results is None:
        return EXIT_ERROR
    return EXIT_OK if all(r.verdict is Admission.VALID for r in results) else EXIT_FOUND


def _cmd_publish(args: argparse.Namespace) -> int:
    from actors.tasks.publish import publish_tasks
    from ops.stack.stack import StackConfig

    results = _validate(args, "publish")
    if results is None:
        return EXIT_ERROR
    valid = [Path(r.path) for r in results if r.verdict is Admission.VALID]
    try:
        published = publish_tasks(
            valid,
            StackConfig.load().kafka.bootstrap,
            LocalObjectStore(Paths.from_env().objects),
            str(sandbox_ref()),
            run=args.run,
        )
    except StackError as exc:
        print(f"trialog tasks publish: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"published {len(published)} of {len(results)} tasks", file=sys.stderr)
    return EXIT_OK if len(published) == len(results) else EXIT_FOUND
