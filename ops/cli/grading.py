"""`trialog verify`, `trialog tasks validate` and `trialog tasks publish`: commands that grade in sandboxes.

Exit codes: verify 0 pass, 1 any other verdict, 2 could not grade; validate 0 all valid, 1 some not,
2 error; publish 0 all published, 1 some not valid or rejected in review (not published), 2 error.

`validate` and `publish` first load and check every task under the folders given, statically, and report
every problem of every task at once (exit 2) before a sandbox is started: a task set is fixed in one round.
What runs sandboxes or talks to Kafka is imported inside the handlers (every `--help` builds this parser).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ops.cli import kit
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.tasks.spec import Task, TaskError, TaskSurvey
    from actors.tasks.validate import TaskValidation, Verifier
    from actors.tasks.verify import Verification

EXIT_OK, EXIT_FOUND, EXIT_ERROR = kit.EXIT_OK, kit.EXIT_FOUND, kit.EXIT_ERROR
VERIFY_LABEL = "dev.trialog.verify"
TASKS_HINT = "fix or remove these tasks (each line names the file at fault), then run the command again"


def register_verify(subparsers: kit.Subparsers) -> None:
    command = kit.command(
        subparsers,
        "verify",
        "grade a final workspace with a task's frozen tests in a fresh sandbox",
        description="Grade WORKSPACE (the agent's version of TASK's repo/) with the task's hidden, frozen "
        "tests in a fresh sandbox. Reward: tampered -1.0, build failed -0.5, all pass 1.0, else "
        "passed/total - 0.2. Exit code 0: pass; 1: any other verdict; 2: could not grade.",
        handler=_cmd_verify,
        examples=(
            "trialog verify examples/tasks/easy-fix-add examples/tasks/easy-fix-add/repo",
            "trialog verify examples/tasks/easy-fix-add WORKSPACE --json",
        ),
    )
    command.add_argument("task", type=kit.existing_dir, metavar="TASK", help="the task folder")
    command.add_argument("workspace", type=kit.existing_dir, metavar="WORKSPACE", help="the folder to grade")
    kit.add_json(command, "print one JSON object (the verdict, reward, tests)")


def add_validate(commands: kit.Subparsers) -> None:
    validate = kit.command(
        commands,
        "validate",
        "admit tasks only if solvable, not already solved, and stable",
        description="Admit tasks only if they are well-formed, solvable (the reference solution passes), "
        "not already solved (repo/ as given fails) and stable (the same verdicts every run). Every task is "
        "first checked statically: all problems are reported at once, before any sandbox starts. Static "
        "findings on the hidden tests (no assertion, no code under test, network, sleeps, the wall clock, "
        "unseeded randomness) are listed under each task; --strict-tests refuses such tasks. "
        "Exit code 0: all valid; 1: some not; 2: malformed tasks or no sandbox engine.",
        handler=_cmd_validate,
        examples=(
            "trialog tasks validate examples/tasks",
            "trialog tasks validate examples/tasks/easy-fix-add --runs 1 --json",
            "trialog tasks validate /tmp/synthesized --strict-tests",
            "trialog tasks validate /tmp/synthesized --runs 5 --record /tmp/validated.jsonl",
        ),
    )
    publish = kit.command(
        commands,
        "publish",
        "validate tasks, then put the valid ones on the compacted `tasks` topic",
        description="Validate tasks (as `trialog tasks validate` does), then put the valid ones on the "
        "compacted `tasks` topic. Exit code 0: all published; 1: some not valid (not published); 2: error.",
        handler=_cmd_publish,
        examples=(
            "trialog tasks publish examples/tasks",
            "trialog tasks publish examples/tasks --run my-run --runs 1",
        ),
    )
    for command in (validate, publish):
        command.add_argument(
            "dirs", type=kit.existing_dir, nargs="+", metavar="DIR", help="task folders or folders of them"
        )
        command.add_argument("--runs", type=kit.positive_int, default=3, metavar="N", help="runs per task")
        command.add_argument(
            "--jobs",
            type=kit.positive_int,
            default=min(4, os.cpu_count() or 1),
            help="tasks validated at once",
        )
        command.add_argument(
            "--strict-tests",
            action="store_true",
            help="refuse a task with static findings on its hidden tests (no assertion, no code under "
            "test, network, sleep, wall clock, unseeded randomness) as weak_tests; without it they are "
            "warnings",
        )
        kit.add_json(command, "print one JSON document: every task's verdict, or the problems found")
    validate.add_argument(
        "--record",
        type=Path,
        metavar="FILE",
        help="append each task's verdict to FILE (JSON lines) as it is decided; a task already recorded "
        "there at the same version with at least --runs runs is not validated again, so a long validation "
        "cut short goes on where it stopped",
    )
    publish.add_argument(
        "--run",
        type=kit.run_id,
        default="",
        help="the run whose `tasks` topic to publish to ('' for none)",
    )
    kit.add_bootstrap(publish)


@contextmanager
def _sandbox_verifier() -> Iterator[Verifier]:
    from actors.tasks.verify import task_quotas, verify
    from ops.paths import Paths
    from ops.stack.sandboxes import default_image, stack_backend
    from sandbox_agent.limits import SandboxSpec

    with stack_backend(Paths.from_env(), labels={VERIFY_LABEL: "1"}) as backend:

        def run(task: Task, workspace: Path) -> Verification:
            spec = SandboxSpec(task.spec.image or default_image(), task_quotas(task))
            return verify(task, workspace, backend, spec)

        yield run


def _cmd_verify(args: argparse.Namespace) -> int:
    from actors.tasks.spec import TaskError, load_task
    from actors.tasks.verify import print_human

    try:
        task = load_task(args.task)
    except TaskError as exc:
        return report_malformed("trialog verify", [exc], as_json=args.json)
    with _sandbox_verifier() as run:
        result = run(task, args.workspace)
    print(json.dumps(result.to_json()) if args.json else print_human(result))
    return EXIT_OK if result.grade.verdict.value == "pass" else EXIT_FOUND


def report_malformed(prog: str, problems: Sequence[TaskError], *, as_json: bool) -> int:
    """Every problem, one line each on stderr (with `--json`: one object on stdout too); exit code 2."""
    count = len(problems)
    message = f"{count} problem{'s' if count != 1 else ''} in the tasks; nothing was run"
    if as_json:
        listed = [{"path": str(problem.path), "problem": problem.problem} for problem in problems]
        print(json.dumps({"error": message, "hint": TASKS_HINT, "problems": listed}, indent=2))
    for problem in problems:
        print(f"{prog}: {problem}", file=sys.stderr)
    print(f"{prog}: {message} ({TASKS_HINT})", file=sys.stderr)  # the one-line form of kit.report_error
    return EXIT_ERROR


def _survey(args: argparse.Namespace, prog: str) -> TaskSurvey | int:
    """Every task under `args.dirs`, checked statically; or, when any is malformed, the exit code after
    reporting all of them."""
    from actors.tasks.spec import survey_tasks

    found = survey_tasks(args.dirs)
    if not found.ok:
        return report_malformed(prog, found.problems, as_json=args.json)
    return found


def _validate(
    args: argparse.Namespace, tasks: Sequence[Task], record: Path | None = None
) -> list[TaskValidation]:
    from actors.tasks.validate import validate_all
    from ops.progress import ProgressBar

    label = f"validating {len(tasks)} tasks x {args.runs} runs"
    with ProgressBar(len(tasks), label, quiet=args.json) as progress:

        def done(result: TaskValidation) -> None:
            progress.advance(f"{result.task_id or result.path}: {result.verdict.value}")
            if record is not None:
                with record.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({**result.to_json(), "runs_asked": args.runs}) + "\n")

        with _sandbox_verifier() as run:
            folders = [task.root for task in tasks]
            results = validate_all(
                folders, run, runs=args.runs, jobs=args.jobs, strict_tests=args.strict_tests, on_done=done
            )
    if not args.json:
        print_validations(results)
    return results


def print_validations(results: Sequence[TaskValidation]) -> None:
    """One line per task (its verdict and why), then its static findings on the hidden tests, if any."""
    for result in results:
        why = f"  ({'; '.join(result.reasons)})" if result.reasons else ""
        print(f"{result.verdict.value:<16} {result.task_id or result.path}{why}")
        for finding in result.findings:
            print(f"  {'finding':<14} {finding}")


def _summary(results: Sequence[TaskValidation], earlier: Sequence[dict[str, Any]] = (), **more: Any) -> str:
    """One document: the counts, then every task's verdict (those validated now, then those recorded)."""
    tasks = [*(result.to_json() for result in results), *earlier]
    valid = sum(task["verdict"] == "valid" for task in tasks)
    document = {"valid": valid, "total": len(tasks), **more, "tasks": tasks}
    if earlier:
        document["recorded"] = len(earlier)
    return json.dumps(document, indent=2)


def _cmd_validate(args: argparse.Namespace) -> int:
    from actors.tasks.validate import Admission

    found = _survey(args, "trialog tasks validate")
    if isinstance(found, int):
        return found
    try:
        recorded = read_record(args.record, found.tasks, args.runs) if args.record else {}
    except (OSError, ValueError) as exc:
        problem = f"{args.record}: cannot be read as a validation record: {exc}"
        return kit.report_problem("trialog tasks validate", problem, as_json=args.json)
    if recorded:
        print(f"{len(recorded)} tasks already validated in {args.record}: not run again", file=sys.stderr)
    todo = [task for task in found.tasks if task.id not in recorded]
    results = _validate(args, todo, args.record)
    earlier = list(recorded.values())
    if not args.json:
        for entry in earlier:
            why = f"  ({'; '.join(entry['reasons'])})" if entry["reasons"] else ""
            print(f"{entry['verdict']:<16} {entry['task']} (recorded){why}")
    if args.json:
        print(_summary(results, earlier))
    fresh_valid = all(r.verdict is Admission.VALID for r in results)
    return EXIT_OK if fresh_valid and all(e["verdict"] == "valid" for e in earlier) else EXIT_FOUND


def read_record(path: Path, tasks: Sequence[Task], runs: int) -> dict[str, dict[str, Any]]:
    """The verdicts `path` holds for `tasks` at their current version with at least `runs` runs, by task
    id (the last line of a task wins). A missing file holds none. A last line without its newline is the
    write a kill cut short: it is cut off the file, so what is appended next starts a line of its own."""
    if not path.exists():
        return {}
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        with path.open("r+b") as file:
            file.truncate(len(data))
    versions = {task.id: task.version for task in tasks}
    found: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"line {number} is not JSON") from None
        if not isinstance(entry, dict):
            raise ValueError(f"line {number} is not a task's verdict")
        task = entry.get("task")
        if not isinstance(task, str):
            continue  # a task that did not load (invalid_spec) has no id: it is validated again
        if versions.get(task) == entry.get("version") and entry.get("runs_asked", 0) >= runs:
            found[task] = entry
    return found


def _cmd_publish(args: argparse.Namespace) -> int:
    from actors.tasks.publish import publish_tasks
    from actors.tasks.validate import Admission
    from ops.stack.images import sandbox_ref
    from ops.stores import open_objects

    found = _survey(args, "trialog tasks publish")
    if isinstance(found, int):
        return found
    # Before minutes of validation: a publish that cannot reach Kafka or the object store says so at once.
    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    objects = open_objects()
    results = _validate(args, found.tasks)
    valid = [Path(r.path) for r in results if r.verdict is Admission.VALID]
    try:
        publication = publish_tasks(valid, bootstrap, objects, str(sandbox_ref()), run=args.run)
    except StackError as exc:
        return kit.report_error("trialog tasks publish", exc, as_json=args.json)
    published, rejected = publication.published, publication.rejected
    if args.json:
        print(_summary(results, published=len(published), rejected_in_review=list(rejected)))
    print(f"published {len(published)} of {len(results)} tasks", file=sys.stderr)
    if rejected:
        print(
            f"{len(rejected)} tasks rejected in review, not published: {', '.join(rejected)}", file=sys.stderr
        )
    return EXIT_OK if len(published) == len(results) else EXIT_FOUND
