"""`trialog bench grading`: what grading one workspace costs, end to end, in fresh sandboxes.

Each round grades a task's gold solution with `trialog verify`'s code path (`actors.tasks.verify`): a
fresh sandbox, the workspace copied in, the trusted collection of the original repo/ when the frozen tests
can parametrize (once per task version per process: the first round pays it), the harness, the report.
The tasks run interleaved, so a slow moment of the machine hits each of them. Compare two commits by
running this in a `git worktree` of each, alternately, on the same engine.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from ops.bench.report import cpu_model, write_section
from ops.cli import kit
from ops.console import say
from ops.paths import REPO_ROOT

DEFAULT_TASKS = ("easy-fix-add", "roman-numerals")  # one plain, one parametrized (a trusted collection)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=kit.positive_int, metavar="N", default=10, help="grades per task")
    parser.add_argument(
        "--tasks",
        nargs="+",
        type=Path,
        metavar="DIR",
        default=[REPO_ROOT / "examples" / "tasks" / name for name in DEFAULT_TASKS],
        help="task folders whose gold solutions are graded",
    )
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "grading")


def run(args: argparse.Namespace) -> int:
    from actors.tasks.spec import load_task
    from actors.tasks.verify import verify
    from ops.stack.images import sandbox_ref
    from sandbox_agent.docker_backend import DockerBackend
    from sandbox_agent.limits import SandboxSpec
    from schemas.blobs import LocalObjectStore

    engine = kit.require_docker()
    tasks = [load_task(folder) for folder in args.tasks]
    times: dict[str, list[float]] = {task.id: [] for task in tasks}
    with tempfile.TemporaryDirectory(prefix="trialog-bench-grading-") as scratch:
        objects = LocalObjectStore(Path(scratch) / "objects")
        backend = DockerBackend(engine.client(), objects, labels={"dev.trialog.bench": "grading"})
        spec = SandboxSpec(str(sandbox_ref()))
        for round_index in range(args.rounds):
            for task in tasks:
                workspace = task.copy_repo(Path(scratch) / f"{task.id}-{round_index}", solved=True)
                started = time.monotonic()
                graded = verify(task, workspace, backend, spec).grade
                times[task.id].append(time.monotonic() - started)
                if graded.verdict.value != "pass":
                    raise SystemExit(f"{task.id}: the gold solution graded {graded.verdict.value}")
            say(f"round {round_index + 1}/{args.rounds}")
    section = _render(args, times)
    print(section)
    if not args.no_record:
        write_section(args.record, section)
        say(f"wrote {args.record}")
    return 0


def _render(args: argparse.Namespace, times: dict[str, list[float]]) -> str:
    rows = [
        f"| {task} | {values[0]:.2f} s | {statistics.median(values[1:] or values):.2f} s | "
        f"{max(values[1:] or values):.2f} s | {len(values)} |"
        for task, values in times.items()
    ]
    return "\n".join(
        [
            "## grading",
            "",
            f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"- machine: {cpu_model()}",
            f"- command: `trialog bench grading --rounds {args.rounds}`",
            "- each grade: a fresh sandbox, the gold workspace, the frozen tests under the harness",
            "",
            "| task | first grade | median of the rest | slowest of the rest | n |",
            "| --- | ---: | ---: | ---: | ---: |",
            *rows,
        ]
    )
