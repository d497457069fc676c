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

from ops.cli import kit
from sandbox_agent.limits import ExecLimits, Quotas, SandboxSpec
from streams.errors import StackError

# `trialog` builds every command group's parser at start-up: what runs a sandbox is imported when it runs.
if TYPE_CHECKING:
    from sandbox_agent.backend import SandboxBackend
    from sandbox_agent.results import StepResult
    from sandbox_agent.snapshots import SnapshotStore


def register(subparsers: kit.Subparsers) -> None:
    sandbox = kit.command(
        subparsers,
        "sandbox",
        "run commands in isolated, quota-bound sandboxes; build or list their images",
        examples=(
            "trialog sandbox run --json -- python3 -c 'print(6*7)'",
            "trialog sandbox images --no-build",
        ),
    )
    commands = kit.subcommands(sandbox, "sandbox_command")
    _add_run(commands)
    _add_images(commands)


def _add_run(commands: kit.Subparsers) -> None:
    defaults, exec_defaults = Quotas(), ExecLimits()
    run = kit.command(
        commands,
        "run",
        "run one command in a fresh sandbox, snapshot its workspace, and remove the sandbox",
        description="Run one command in a fresh sandbox, snapshot its workspace, and remove the sandbox. "
        "The exit status is the command's own (128+N when a signal N killed it), or 2 when trialog failed. "
        "Sizes take binary units (512m, 1g, 64KiB) and must be whole bytes.",
        handler=_cmd_run,
        examples=(
            "trialog sandbox run --json -- id -u",
            "trialog sandbox run --timeout 5 --memory 512m --cpus 0.5 -- python3 -c 'print(6*7)'",
            "trialog sandbox run --workspace examples/tasks/easy-fix-add/repo -- ls",
        ),
    )
    run.add_argument("--image", help="image to run (default: trialog's sandbox image)")
    run.add_argument(
        "--timeout", type=kit.positive_seconds, default=exec_defaults.timeout_s, metavar="S", help="wall time"
    )
    run.add_argument(
        "--memory", type=kit.memory_size, default=kit.size_text(defaults.memory_bytes), metavar="SIZE",
        help="memory, in bytes or with a unit (also holds what is written to /workspace and /tmp)",
    )  # fmt: skip
    run.add_argument("--cpus", type=kit.positive_float, default=defaults.cpus, metavar="N", help="CPUs")
    run.add_argument("--pids", type=kit.positive_int, default=defaults.pids, metavar="N", help="processes")
    run.add_argument(
        "--disk", type=kit.size, metavar="SIZE",
        help=f"size of /workspace and of /tmp, each (default: {kit.size_text(defaults.workspace_bytes)} and "
        f"{kit.size_text(defaults.tmp_bytes)})",
    )  # fmt: skip
    run.add_argument(
        "--max-output", type=kit.non_negative_size, metavar="SIZE",
        default=kit.size_text(exec_defaults.output_bytes),
        help="bytes of stdout and of stderr kept, each (the rest is dropped and counted)",
    )  # fmt: skip
    run.add_argument(
        "--workspace",
        type=kit.existing_dir,
        metavar="DIR",
        help="copy this folder in (links are not followed)",
    )
    kit.add_json(run, "print one JSON object: exit_code, stdout, stderr, timed_out, ... snapshot_id")
    run.add_argument(
        "--label", type=kit.key_value, action="append", default=[], metavar="KEY=VALUE",
        help="extra container label (repeatable)",
    )  # fmt: skip
    run.add_argument("argv", nargs="+", metavar="CMD", help="the command and its arguments, after --")


def _add_images(commands: kit.Subparsers) -> None:
    images = kit.command(
        commands,
        "images",
        "build the sandbox images that are missing (nothing is pulled), then list them",
        handler=_cmd_images,
        examples=("trialog sandbox images", "trialog sandbox images --no-build --json"),
    )
    images.add_argument("--no-build", action="store_true", help="only list, with whether each is present")
    kit.add_json(images)


def spec_from_args(args: argparse.Namespace, default_image: str) -> SandboxSpec:
    """The sandbox `args` ask for; `--disk` sets /workspace and /tmp alike (unset: each its default)."""
    defaults = Quotas()
    disk: int | None = args.disk
    quotas = Quotas(
        memory_bytes=args.memory,
        cpus=args.cpus,
        pids=args.pids,
        workspace_bytes=defaults.workspace_bytes if disk is None else disk,
        tmp_bytes=defaults.tmp_bytes if disk is None else disk,
    )
    return SandboxSpec(args.image or default_image, quotas)


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
    from ops.stores import open_objects
    from sandbox_agent.docker_backend import DockerBackend
    from sandbox_agent.errors import SandboxError

    # Every value was checked by the parser; what is left to fail is the engine and the sandbox.
    spec = spec_from_args(args, str(images.sandbox_ref()))
    paths = Paths.from_env()
    objects = open_objects(paths=paths)
    client = kit.require_docker().client()
    try:
        backend = DockerBackend(client, objects, labels=dict(args.label))
        limits = ExecLimits(args.timeout, args.max_output)
        step = run_once(backend, backend.snapshots, spec, args.argv, limits, args.workspace)
    except SandboxError as exc:
        failed = StackError(str(exc), "trialog sandbox images lists the images; trialog status the stack")
        return kit.report_error("trialog sandbox run", failed, as_json=args.json)
    finally:
        client.close()
    print_step(step, as_json=args.json)
    return min(step.result.exit_code, 255)


def _cmd_images(args: argparse.Namespace) -> int:
    from ops.paths import Paths
    from ops.stack import images

    paths = Paths.from_env()
    client = kit.require_docker().client()
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
