"""`trialog sandbox`: run one command in a fresh sandbox (`run`), build or list the images (`images`).

`run --json` prints one object with the keys exit_code, stdout, stderr, timed_out, oom_killed, truncated,
duration_s and snapshot_id (plus how many bytes of each stream were dropped); the exit status is the
command's own (a command killed by a signal gives 128+N, as in a shell), or 2 when trialog itself failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox_agent.limits import ExecLimits, Quotas, SandboxSpec, parse_size

# `trialog` builds every command group's parser at start-up: what runs a sandbox is imported when it runs.
if TYPE_CHECKING:
    import docker

    from ops.paths import Paths
    from sandbox_agent.backend import SandboxBackend
    from sandbox_agent.results import StepResult
    from sandbox_agent.snapshots import SnapshotStore

TRIALOG_ERROR = 2


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "run commands in isolated, quota-bound sandboxes; build or list their images"
    sandbox = subparsers.add_parser("sandbox", help=text, description=text)
    commands = sandbox.add_subparsers(dest="sandbox_command", required=True, metavar="SUBCOMMAND")
    _add_run(commands)
    _add_images(commands)


def _add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defaults, exec_defaults = Quotas(), ExecLimits()
    text = "run one command in a fresh sandbox, snapshot its workspace, and remove the sandbox"
    run = commands.add_parser(
        "run", help=text, description=text, epilog="example: trialog sandbox run --json -- id -u"
    )
    run.add_argument("--image", help="image to run (default: trialog's sandbox image)")
    run.add_argument(
        "--timeout", type=float, default=exec_defaults.timeout_s, metavar="S", help="wall time (s)"
    )
    run.add_argument(
        "--memory", type=parse_size, default=defaults.memory_bytes, metavar="SIZE", help="e.g. 2g"
    )
    run.add_argument("--cpus", type=float, default=defaults.cpus, metavar="N")
    run.add_argument("--pids", type=int, default=defaults.pids, metavar="N")
    run.add_argument(
        "--disk",
        type=parse_size,
        metavar="SIZE",
        help="size of /workspace and of /tmp, each (default 1g, 256m)",
    )
    run.add_argument(
        "--output",
        type=parse_size,
        default=exec_defaults.output_bytes,
        metavar="SIZE",
        help="kept per stream",
    )
    run.add_argument(
        "--workspace", type=Path, metavar="DIR", help="copy this folder in (links are not followed)"
    )
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument(
        "--label", action="append", default=[], metavar="KEY=VALUE", help="extra container label"
    )
    run.add_argument("argv", nargs="+", metavar="-- CMD [ARG...]")
    run.set_defaults(handler=_cmd_run)


def _add_images(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "build the sandbox images that are missing (nothing is pulled), then list them"
    images = commands.add_parser("images", help=text, description=text)
    images.add_argument("--no-build", action="store_true", help="only list, with whether each is present")
    images.add_argument("--json", action="store_true", help="print one JSON object")
    images.set_defaults(handler=_cmd_images)


def spec_from_args(args: argparse.Namespace, default_image: str) -> SandboxSpec:
    defaults = Quotas()
    disk = args.disk
    quotas = Quotas(
        memory_bytes=args.memory,
        cpus=args.cpus,
        pids=args.pids,
        workspace_bytes=disk or defaults.workspace_bytes,
        tmp_bytes=disk or defaults.tmp_bytes,
    )
    return SandboxSpec(args.image or default_image, quotas)


def labels_from_args(pairs: Sequence[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"a label is KEY=VALUE, not {pair!r}")
        labels[key] = value
    return labels


def run_once(
    backend: SandboxBackend,
    snapshots: SnapshotStore,
    spec: SandboxSpec,
    argv: Sequence[str],
    limits: ExecLimits,
    workspace: Path | None = None,
) -> StepResult:
    """Create a sandbox (with `workspace` copied in), run `argv`, snapshot, and destroy the sandbox."""
    from sandbox_agent.hosttree import read_tree
    from sandbox_agent.results import StepResult

    sandbox = backend.create(spec)
    try:
        if workspace is not None:
            backend.restore(sandbox, snapshots.save(*read_tree(workspace)))
        result = backend.exec(sandbox, argv, limits=limits)
        return StepResult(result, str(backend.snapshot(sandbox)))
    finally:
        backend.destroy(sandbox)


def print_step(step: StepResult, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(step.to_json()))
        return
    result = step.result
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    notes = [name for name in ("timed_out", "oom_killed", "truncated") if getattr(result, name)]
    summary = f"exit {result.exit_code} in {result.duration_s:.3f} s; snapshot {step.snapshot_id}"
    print(f"trialog sandbox: {summary}{'; ' + ', '.join(notes) if notes else ''}", file=sys.stderr)


def _cmd_run(args: argparse.Namespace) -> int:
    from ops.paths import Paths
    from ops.stack import images
    from sandbox_agent.docker_backend import DockerBackend
    from sandbox_agent.errors import SandboxError
    from schemas.blobs import LocalObjectStore

    if args.workspace is not None and not args.workspace.is_dir():
        print(f"trialog sandbox run: {args.workspace} is not a folder", file=sys.stderr)
        return TRIALOG_ERROR
    try:
        spec = spec_from_args(args, str(images.sandbox_ref()))
        labels = labels_from_args(args.label)
    except ValueError as exc:
        print(f"trialog sandbox run: {exc}", file=sys.stderr)
        return TRIALOG_ERROR
    paths = Paths.from_env()
    objects = LocalObjectStore(paths.objects)
    client = _docker_client(paths)
    try:
        backend = DockerBackend(client, objects, labels=labels)
        limits = ExecLimits(args.timeout, args.output)
        step = run_once(backend, backend.snapshots, spec, args.argv, limits, args.workspace)
    except SandboxError as exc:
        print(f"trialog sandbox run: {exc}", file=sys.stderr)
        return TRIALOG_ERROR
    finally:
        client.close()
    print_step(step, as_json=args.json)
    return min(step.result.exit_code, 255)


def _cmd_images(args: argparse.Namespace) -> int:
    from ops.paths import Paths
    from ops.stack import images

    paths = Paths.from_env()
    client = _docker_client(paths)
    try:
        refs = [str(ref) for ref in images.ensure_all(client, paths)] if not args.no_build else None
        absent = set(images.missing(client))
    finally:
        client.close()
    listed = refs or [str(images.base_ref()), *(str(images.derived_ref(kind)) for kind in images.DERIVED)]
    rows = [{"image": ref, "present": ref not in absent} for ref in listed]
    if args.json:
        print(json.dumps({"images": rows, "sandbox": str(images.sandbox_ref())}))
    else:
        for row in rows:
            print(f"{row['image']:<32} {'present' if row['present'] else 'missing'}")
    return 0 if all(row["present"] for row in rows) else 1


def _docker_client(paths: Paths) -> docker.DockerClient:
    from ops.stack import docker_engine
    from streams.errors import StackError

    engine = docker_engine.current(paths)
    if engine is None:
        raise StackError("no Docker engine answers", "run `trialog up` (or `trialog prepare`) first")
    return engine.client()
