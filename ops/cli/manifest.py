"""`trialog tasks manifest` and `trialog tasks materialize`: a synthesized task set as one small file.

Exit codes: 0 done; 1 (materialize) some tasks could not be rebuilt as they were; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from ops.cli import kit


def add_manifest(commands: kit.Subparsers) -> None:
    manifest = kit.command(
        commands,
        "manifest",
        "write a synthesized task set as a manifest that rebuilds it (a few hundred bytes a task)",
        description="Write the synthesized tasks under DIR (task folders or folders of them) to one file: "
        "for each, its release, task.toml, solution patch and version (the hash of its folder). "
        "`trialog tasks materialize` rebuilds the very same folders from it and the releases' sdists, "
        "checking each version, so a validated set can be shared, committed or moved to another machine "
        "without copying the projects. A name ending in .gz is gzip-compressed.",
        handler=_cmd_manifest,
        examples=(
            "trialog tasks manifest /tmp/synth --out tasks.jsonl.gz",
            "trialog tasks manifest /tmp/synth/a /tmp/synth/b --out tasks.jsonl --json",
        ),
    )
    manifest.add_argument(
        "dirs", type=kit.existing_dir, nargs="+", metavar="DIR", help="task folders or folders of them"
    )
    manifest.add_argument("--out", type=Path, required=True, metavar="FILE", help="the manifest to write")
    kit.add_json(manifest, "print one JSON document: the tasks and projects written")

    materialize = kit.command(
        commands,
        "materialize",
        "rebuild the task folders a manifest lists, from their releases' sdists",
        description="Rebuild every task of a manifest under --out: each release's sdist is fetched from "
        "PyPI once (cached), and each folder is written and checked against the version the manifest "
        "records; one that differs is not written and is listed. Tasks that name an image layer "
        "(`image = trialog-synth:...`) need it on this engine: `tasks synthesize --test-deps` builds it.",
        handler=_cmd_materialize,
        examples=(
            "trialog tasks materialize tasks.jsonl.gz --out /tmp/synth",
            "trialog tasks materialize tasks.jsonl.gz --out /tmp/synth --project toolz==1.2.0 --json",
            "trialog tasks materialize tasks.jsonl.gz --fetch-only",
        ),
    )
    materialize.add_argument("manifest", type=kit.existing_file, metavar="FILE", help="the manifest to read")
    materialize.add_argument("--out", type=Path, metavar="DIR", help="where the folders go (required)")
    materialize.add_argument(
        "--project", action="append", default=[], metavar="NAME==VERSION",
        help="only the tasks of this release (repeatable; default: all)",
    )  # fmt: skip
    materialize.add_argument(
        "--fetch-only", action="store_true", help="fetch the releases' sdists into the cache, write nothing"
    )
    kit.add_json(materialize, "print one JSON document: how many were rebuilt, and the problems")


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _cmd_manifest(args: argparse.Namespace) -> int:
    from actors.tasks.spec import survey_tasks
    from actors.tasks.synth.manifest import ManifestError, entry_of, write_manifest
    from ops.cli.grading import report_malformed

    found = survey_tasks(args.dirs)
    if not found.ok:
        return report_malformed("trialog tasks manifest", found.problems, as_json=args.json)
    try:
        entries = [entry_of(task) for task in found.tasks]
        count = write_manifest(args.out, entries)
    except (ManifestError, OSError) as exc:
        return kit.report_problem("trialog tasks manifest", str(exc), as_json=args.json)
    projects = sorted({entry.project for entry in entries})
    document = {"tasks": count, "projects": projects, "out": str(args.out), "bytes": args.out.stat().st_size}
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(f"{count} tasks from {len(projects)} projects in {args.out} ({document['bytes']} bytes)")
    return kit.EXIT_OK


def _cmd_materialize(args: argparse.Namespace) -> int:
    from actors.tasks.synth.manifest import ManifestEntry, ManifestError, materialize, read_manifest
    from actors.tasks.synth.project import ProjectError, load_project
    from ops.paths import Paths
    from ops.progress import ProgressBar
    from ops.synth_sources import SourceError, fetch_project, parse_requirement

    prog = "trialog tasks materialize"
    if args.out is None and not args.fetch_only:
        return kit.report_problem(prog, "--out DIR is required: where the task folders go", as_json=args.json)
    try:
        wanted = {parse_requirement(project) for project in args.project}
        entries = read_manifest(args.manifest)
    except (ValueError, ManifestError) as exc:
        return kit.report_problem(prog, str(exc), as_json=args.json)
    by_project: dict[str, list[ManifestEntry]] = defaultdict(list)
    for entry in entries:
        if not wanted or entry.release in wanted:
            by_project[entry.project].append(entry)
    missing = sorted(f"{name}=={version}" for name, version in wanted - {e.release for e in entries})
    if missing:
        problem = f"the manifest has no task of {', '.join(missing)}"
        return kit.report_problem(prog, problem, as_json=args.json)
    paths = Paths.from_env()
    if args.fetch_only:
        return _fetch_only(sorted({listed[0].release for listed in by_project.values()}), paths, args)
    problems: list[str] = []
    written = done = 0
    total = sum(len(listed) for listed in by_project.values())
    with ProgressBar(total, f"rebuilding {total} tasks", quiet=args.json) as progress:
        for source, listed in sorted(by_project.items()):
            name, version = listed[0].release
            try:
                project = load_project(fetch_project(name, version, paths), name, version)
            except (ProjectError, SourceError) as exc:
                problems += [f"{entry.task_id}: {source} cannot be had: {exc}" for entry in listed]
                done += len(listed)
                progress.update(done, f"{source}: cannot be had")
                continue
            for entry in listed:
                try:
                    materialize(entry, project, args.out)
                    written += 1
                except ManifestError as exc:
                    problems.append(str(exc))
                done += 1
                progress.update(done, entry.task_id)
    document: dict[str, Any] = {
        "written": written,
        "total": total,
        "projects": sorted(by_project),
        "out": str(args.out),
        "problems": problems,
    }
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        for problem in problems:
            print(f"not rebuilt: {problem}")
        print(f"rebuilt {written} of {total} tasks into {args.out}")
    return kit.EXIT_OK if not problems else kit.EXIT_FOUND


def _fetch_only(releases: list[tuple[str, str]], paths: Any, args: argparse.Namespace) -> int:
    from ops.synth_sources import SourceError, fetch_project

    fetched: dict[str, str] = {}
    for name, version in releases:
        try:
            fetched[f"{name}=={version}"] = str(fetch_project(name, version, paths))
        except SourceError as exc:
            return kit.report_problem("trialog tasks materialize", str(exc), as_json=args.json)
        _say(f"{name}=={version}: {fetched[f'{name}=={version}']}")
    if args.json:
        print(json.dumps({"fetched": fetched}, indent=2))
    return kit.EXIT_OK
