"""`trialog tasks synthesize`: bug-fix tasks from a real project's release (or checkout) and its own tests.

Exit codes: 0 at least one task kept; 1 none kept; 2 bad input or no sandbox engine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ops.cli import kit


def add_synthesize(commands: kit.Subparsers) -> None:
    command = kit.command(
        commands,
        "synthesize",
        "make bug-fix tasks from a real project: mutants its own tests catch",
        description="Make bug-fix tasks from a real Python project with its own test suite. The suite first "
        "runs several times in a sandbox (only tests that pass every time are used; flaky ones are "
        "listed); then AST mutations are tried one at a time, spread over modules and operators. A "
        "mutant becomes a task when 1 to K of the tests that reach it fail and the same set fails on a "
        "rerun; mutants failing the same set are deduplicated. Each task's repo/ is the mutated project "
        "with nothing that reveals the fix, its hidden tests the failing ones plus a sample of passing "
        "ones, its instruction written from the failing tests only. Tasks sharing text with --eval sets "
        "are dropped. Exit code 0: tasks kept; 1: none; 2: bad input or no sandbox engine.",
        handler=_cmd_synthesize,
        examples=(
            "trialog tasks synthesize --project toolz==1.2.0 --out /tmp/synth --max 50",
            "trialog tasks synthesize --project toolz==1.2.0 --fetch-only",
            "trialog tasks synthesize --project funcy==2.1 --test-deps whatever==0.7 --out /tmp/synth",
            "trialog tasks synthesize --repo ./mylib --name mylib --version 0.1 --out /tmp/synth --jobs 2",
            "trialog tasks synthesize --project boltons==26.2.0 --out /tmp/s --eval /tmp/humaneval --json",
            "trialog tasks synthesize --project toolz==1.2.0 --project isodate==0.7.2 --out /tmp/s --max 100",
        ),
    )
    source = command.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--project", action="append", metavar="NAME==VERSION",
        help="a release on PyPI (its sdist is fetched); repeat it to run several projects one after the "
        "other into one --out (the report then has one entry per project and the totals)",
    )  # fmt: skip
    source.add_argument("--repo", type=kit.existing_dir, metavar="DIR", help="a project checkout on disk")
    command.add_argument("--name", help="the project's name, with --repo (default: the folder's name)")
    command.add_argument("--version", dest="project_version", default="0", help="its version, with --repo")
    command.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="where the task folders go (required); tasks of the same release already there are kept, their "
        "failing-test sets taken and their mutants not run again, so runs with other seeds add up",
    )
    command.add_argument(
        "--fetch-only", action="store_true", help="fetch and check the project, print its folder, stop"
    )
    command.add_argument("--max", type=kit.positive_int, metavar="N", help="stop after N kept tasks")
    command.add_argument("--max-mutants", type=kit.positive_int, metavar="M", help="try at most M mutants")
    command.add_argument("--seed", type=kit.non_negative_int, default=0, help="which mutants, in which order")
    command.add_argument(
        "--jobs", type=kit.positive_int, default=min(2, os.cpu_count() or 1), help="sandboxes at once"
    )
    command.add_argument(
        "--max-failing", type=kit.positive_int, default=10, metavar="K", help="most tests a kept mutant fails"
    )
    command.add_argument(
        "--baseline-runs", type=kit.positive_int, default=3, metavar="R", help="runs of the suite as given"
    )
    command.add_argument(
        "--pass-to-pass", type=kit.non_negative_int, default=10, metavar="P", help="passing tests per task"
    )
    command.add_argument(
        "--validate-runs", type=kit.non_negative_int, default=1, metavar="R",
        help="runs of `tasks validate` on each task once written (the real grader, as given and solved), "
        "beside the mutant runs; a task not valid is removed; 0: none",
    )  # fmt: skip
    command.add_argument(
        "--eval", type=kit.existing_dir, action="append", default=[], metavar="DIR",
        help="an evaluation task set the synthesized tasks must not overlap (repeatable)",
    )  # fmt: skip
    command.add_argument("--image", help="the sandbox image (default: the stack's sandbox image)")
    command.add_argument(
        "--test-deps", action="append", default=[], metavar="REQ",
        help="a package the project's tests need (NAME==VERSION; its wheels and theirs come from PyPI at "
        "set-up into an image layer built on the sandbox image, which the tasks then name) (repeatable)",
    )  # fmt: skip
    command.add_argument(
        "--wheel", type=kit.existing_file, action="append", default=[], metavar="FILE",
        help="a local wheel for that layer, beside --test-deps (repeatable)",
    )  # fmt: skip
    kit.add_json(command, "print one JSON document: the yield report")


def _fail(message: str, hint: str, *, as_json: bool) -> int:
    return kit.report_problem("trialog tasks synthesize", message, hint, as_json=as_json)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cmd_synthesize(args: argparse.Namespace) -> int:
    from actors.tasks.synth.project import ProjectError
    from ops.paths import Paths
    from ops.synth_sources import SourceError, parse_requirement

    paths = Paths.from_env()
    try:  # every value is checked before anything is fetched or run
        if args.out is None and not args.fetch_only:
            raise ValueError("--out DIR is required: where the task folders go")
        if args.project is not None:
            if args.name is not None:
                raise ValueError("--name goes with --repo; --project names the release itself")
            releases = [parse_requirement(project) for project in args.project]
            if len(set(releases)) != len(releases):
                raise ValueError("a --project is named twice")
    except ValueError as exc:
        return _fail(str(exc), "", as_json=args.json)
    reports: list[dict[str, Any]] = []
    fetched: list[dict[str, str]] = []
    for index in range(len(args.project) if args.project is not None else 1):
        try:
            project, root = _load(args, index, paths)
        except (ValueError, ProjectError, SourceError) as exc:
            return _fail(str(exc), "", as_json=args.json)
        _say(f"{project.source}: {len(project.modules)} modules, {len(project.tests)} test files")
        if args.fetch_only:
            fetched.append({"project": project.source, "path": str(root)})
            continue
        report = _synthesize(project, args, paths)
        if report is None:
            return kit.EXIT_ERROR
        reports.append(report)
        if not args.json:
            _print_report(report)
    if args.fetch_only:
        if args.json:
            print(json.dumps(fetched[0] if len(fetched) == 1 else {"projects": fetched}))
        else:
            print("\n".join(entry["path"] for entry in fetched))
        return kit.EXIT_OK
    if args.json:
        print(json.dumps(reports[0] if len(reports) == 1 else _totals(reports), indent=2))
    elif len(reports) > 1:
        totals = _totals(reports)
        print(
            f"all {len(reports)} projects: {totals['kept']} tasks kept of {totals['mutants_tried']} mutants "
            f"tried in {totals['seconds']} s ({totals['seconds_per_kept_task']} s per kept task)"
        )
    return kit.EXIT_OK if any(report["kept"] for report in reports) else kit.EXIT_FOUND


def _load(args: argparse.Namespace, index: int, paths: Any) -> tuple[Any, Path]:
    """The project to synthesize from: the `index`-th --project's sdist (fetched once), or --repo."""
    from actors.tasks.synth.project import load_project
    from ops.synth_sources import fetch_project, parse_requirement

    if args.project is not None:
        name, version = parse_requirement(args.project[index])
        _say(f"fetching the sdist of {name}=={version} ...")
        root = fetch_project(name, version, paths)
    else:
        root = args.repo
        name, version = args.name or Path(root).resolve().name, args.project_version
    return load_project(root, name, version), Path(root)


def _totals(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One document for several projects: each one's report, and what they add up to."""
    kept = sum(report["kept"] for report in reports)
    seconds = round(sum(report["seconds"] for report in reports), 1)
    return {
        "projects": reports,
        "kept": kept,
        "mutants_tried": sum(report["mutants_tried"] for report in reports),
        "tests_run": sum(report["tests_run"] for report in reports),
        "contaminated": [task for report in reports for task in report["contaminated"]],
        "seconds": seconds,
        "seconds_per_kept_task": round(seconds / kept, 2) if kept else None,
        "out": reports[0]["out"],
    }


def _synthesize(project: Any, args: argparse.Namespace, paths: Any) -> dict[str, Any] | None:
    from actors.tasks.synth.pipeline import Synthesizer, SynthOptions
    from actors.tasks.synth.suite import SuiteSandbox
    from ops.stack.sandboxes import default_image, stack_backend
    from sandbox_agent.limits import MIB, Quotas, SandboxSpec

    image = args.image or default_image()
    layer = None
    if args.test_deps or args.wheel:
        from ops.stack import docker_engine
        from ops.synth_image import download_wheels, ensure_layer

        wheels = [*download_wheels(args.test_deps, paths), *args.wheel]
        client = docker_engine.require(paths).client()
        try:
            layer = image = ensure_layer(client, wheels)
        finally:
            client.close()
        _say(f"image layer {layer}: {len(wheels)} wheels for the tests ({', '.join(w.name for w in wheels)})")
    quotas = Quotas(
        memory_bytes=1024 * MIB, cpus=1.0, pids=256, workspace_bytes=256 * MIB, tmp_bytes=256 * MIB
    )
    spec = SandboxSpec(image, quotas)
    options = SynthOptions(
        max_tasks=args.max,
        max_mutants=args.max_mutants,
        seed=args.seed,
        jobs=args.jobs,
        max_failing=args.max_failing,
        baseline_runs=args.baseline_runs,
        pass_to_pass=args.pass_to_pass,
        validate_runs=args.validate_runs,
    )
    with stack_backend(paths, labels={"dev.trialog.synthesize": "1"}) as backend:
        with SuiteSandbox(backend, spec, project, options.suite_timeout_s) as suite:
            shadowed = suite.shadowed()
            copies = suite.image_copies()
        if shadowed:
            listed = ", ".join(f"{name} (at {origin})" for name, origin in sorted(shadowed.items()))
            message = f"the sandbox image already has {listed}: the grader would import it, never the project"
            _fail(message, "pick a project the sandbox image lacks", as_json=args.json)
            return None
        if copies:
            message = f"the sandbox image holds copies of the project's modules: {', '.join(copies[:5])}"
            _fail(
                message,
                "an agent could read the original there; use an image without them",
                as_json=args.json,
            )
            return None
        _say(f"image {image}: no copy of the project's modules, nothing shadows its packages")
        out = Path(args.out)
        report = Synthesizer(project, backend, spec, out, options, image=args.image, progress=_say).run()
    document = report.as_dict()
    document["contaminated"] = _decontaminate(out, report.kept, args.eval) if args.eval else []
    if document["contaminated"]:
        document["kept"] -= len(document["contaminated"])
        document["tasks"] = [task for task in document["tasks"] if task not in document["contaminated"]]
    document["out"] = str(out)
    return document


def _decontaminate(out: Path, kept: list[str], evals: list[Path]) -> list[str]:
    import shutil

    from actors.tasks.decontaminate import decontaminate
    from actors.tasks.spec import load_task, survey_tasks

    eval_set = survey_tasks(evals)
    report = decontaminate([load_task(out / task) for task in kept], list(eval_set.tasks), progress=_say)
    for flagged in report.flagged:
        shutil.rmtree(out / flagged.task, ignore_errors=True)
        _say(f"dropped {flagged.task}: it shares text with {flagged.matches[0].eval_task}")
    return [flagged.task for flagged in report.flagged]


def _print_report(report: dict[str, Any]) -> None:
    print(f"{report['project']}: {report['kept']} tasks kept of {report['mutants_tried']} mutants tried")
    print(f"  usable tests {report['usable_tests']}, flaky {len(report['flaky_tests'])}")
    if report["already_in_out"]:
        print(f"  already in the folder: {report['already_in_out']} tasks of this release (their sets taken)")
    for reason, count in report["rejected"].items():
        print(f"  rejected {reason}: {count}")
    if report["contaminated"]:
        print(f"  dropped as overlapping an eval set: {len(report['contaminated'])}")
    per_task = report["seconds_per_kept_task"]
    print(f"  tests run {report['tests_run']}; {report['seconds']} s; {per_task} s per kept task")
    print(f"  tasks in {report['out']}")
