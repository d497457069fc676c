"""Grading a workspace snapshot: restore it from the object store into a host folder, then `verify` it.

The snapshot's manifest is checked on load (canonical relative paths, nothing inside a file or a link),
its blobs are checked against their hashes, and it is written into a fresh private temporary folder
without following any link (`sandbox_agent.hosttree.write_tree`). From there the rules are exactly
`actors.tasks.verify`'s (and `trialog verify`'s): the tamper check against repo/, the copy that drops
compiled Python and escaping links, the build and the frozen tests under the harness, in a fresh sandbox.
Nothing in the restored tree is run on the host.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from actors.tasks.spec import Task
from actors.tasks.verify import Verification, task_quotas, verify
from actors.tasks.workspace import CopyLimits, WorkspaceError
from sandbox_agent.backend import SandboxBackend
from sandbox_agent.hosttree import write_tree
from sandbox_agent.limits import SandboxSpec
from sandbox_agent.manifest import Kind, Manifest, SnapshotId
from sandbox_agent.scratch import owned_temp_dir
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import ObjectStore


class Grader(Protocol):
    def __call__(self, task: Task, snapshot_id: str, image: str | None) -> Verification:
        """Grade the workspace `snapshot_id` of `task` in a sandbox of `image` (None: the task's own).
        Raises on an infrastructure failure (the caller turns it into verdict `error`)."""
        ...


def check_size(manifest: Manifest, limits: CopyLimits) -> None:
    """Refuse, before writing anything, a snapshot larger than a workspace may be."""
    files = sum(1 for entry in manifest.entries if entry.kind is not Kind.DIR)
    size = sum(entry.size for entry in manifest.files)
    if files > limits.max_files:
        raise WorkspaceError(f"the snapshot holds {files} files and links, more than {limits.max_files}")
    if size > limits.max_bytes:
        raise WorkspaceError(f"the snapshot holds {size} bytes, more than {limits.max_bytes}")


def restore_to_folder(
    objects: ObjectStore, snapshot_id: str, dest: Path, limits: CopyLimits | None = None
) -> Manifest:
    """Write the snapshot's tree into the empty folder `dest`; returns its manifest."""
    snapshots = SnapshotStore(objects)
    manifest = snapshots.load(SnapshotId.parse(snapshot_id))
    check_size(manifest, limits or CopyLimits())
    write_tree(dest, manifest, snapshots.content)
    return manifest


def verify_snapshot(
    task: Task,
    snapshot_id: str,
    objects: ObjectStore,
    backend: SandboxBackend,
    spec: SandboxSpec,
    *,
    nonce: Callable[[], str] = lambda: secrets.token_hex(16),
    static: bool = False,
    diff: bool = False,
) -> Verification:
    """`verify` on the workspace a snapshot holds; its duration includes the restore."""
    started = time.monotonic()
    with owned_temp_dir(prefix="trialog-grade-") as scratch:  # swept if this process is killed
        workspace = Path(scratch) / "workspace"
        workspace.mkdir(mode=0o700)
        restore_to_folder(objects, snapshot_id, workspace)
        result = verify(task, workspace, backend, spec, nonce=nonce, static=static, diff=diff)
    return dataclasses.replace(result, duration_s=time.monotonic() - started)


class SnapshotGrader:
    """A `Grader` on a sandbox backend, reading snapshots from the store the sandbox workers write."""

    def __init__(
        self,
        backend: SandboxBackend,
        objects: ObjectStore,
        default_image: str,
        *,
        static: bool = False,
        diff: bool = False,
        background: bool = False,
    ) -> None:
        self.backend = backend
        self.objects = objects
        self.default_image = default_image
        self.static = static  # also the static signals (lint and type findings added): seconds per grade
        self.diff = diff  # also the change as a bounded diff (for a model judge)
        self.background = background  # grading nothing waits for: low CPU priority (SandboxSpec)

    def __call__(self, task: Task, snapshot_id: str, image: str | None) -> Verification:
        spec = SandboxSpec(
            image or task.spec.image or self.default_image, task_quotas(task), background=self.background
        )
        return verify_snapshot(
            task, snapshot_id, self.objects, self.backend, spec, static=self.static, diff=self.diff
        )
