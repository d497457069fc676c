"""A task as it is published: its bundle in the object store, written and read back here, and its record.

The task folder travels as a deterministic tarball in the object store (`bundle`), so any worker that reads
the store can grade against exactly the version that was validated; repo/ is also stored as a workspace
snapshot (`initial_snapshot_id`), the tree an episode's first step restores. `task_record` is the
`TaskPublished` record `actors.tasks.publish` puts on the `tasks` topic.

Reading a bundle back (`unpack_bundle`, the audit side's `ops.bundled_tasks`) lives beside writing it, so
that the two change together: the bundle is fetched by its hash, unpacked into a fresh folder with
tarfile's `data` filter (no links out, no devices, no absolute paths), loaded, and refused unless it holds
exactly the task id and version the record names.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from actors.tasks.spec import Task, TaskError, TaskLimits, load_task
from actors.tasks.verify import task_quotas
from sandbox_agent.limits import MIB
from schemas.blobs import BlobIntegrityError, BlobRef, ObjectStore
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.requests import ResourceLimits

BUNDLE_MEDIA_TYPE = "application/x-tar"
HARNESS_COMMAND = "python3 -I trialog_launch.py /workspace"  # see actors.tasks.verify
DIFFICULTY = {"easy": 0.25, "medium": 0.5, "hard": 0.75}
# What `unpack_bundle` raises for a bundle that cannot be used: missing or corrupt in the store, not a tar,
# or not the task (version) its record names.
UNUSABLE_BUNDLE: tuple[type[Exception], ...] = (BlobIntegrityError, TaskError, tarfile.TarError)


def bundle(task: Task) -> bytes:
    """The task folder as a tar with fixed owners and times: the same folder gives the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(task.root.rglob("*")):
            if "__pycache__" in path.parts or path.is_symlink():
                continue
            info = tar.gettarinfo(str(path), arcname=path.relative_to(task.root).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def initial_snapshot(task: Task, store: ObjectStore) -> str:
    """Store repo/ as a workspace snapshot (links recorded, never followed); returns its id."""
    from sandbox_agent.hosttree import read_tree
    from sandbox_agent.snapshots import SnapshotStore

    manifest, contents = read_tree(task.repo_dir)
    return str(SnapshotStore(store).save(manifest, contents))


def resource_limits(task: Task) -> ResourceLimits | None:
    """The task's [limits] as the quotas a SandboxRequest carries; None when it sets none."""
    limits = task.spec.limits
    if limits == TaskLimits():
        return None
    quotas = task_quotas(task)
    return ResourceLimits(
        cpus=quotas.cpus,
        memory_mb=quotas.memory_bytes // MIB,
        pids=quotas.pids,
        disk_mb=quotas.workspace_bytes // MIB,
    )


def task_record(
    task: Task, bundle_ref: BlobRef, origin: Origin, image: str, snapshot_id: str | None = None
) -> TaskPublished:
    meta = task.spec.meta
    return TaskPublished(
        meta=origin.record_meta(),
        task_id=task.id,
        task_version=task.version,
        instruction=task.spec.instruction,
        image=task.spec.image or image,
        timeout_s=task.spec.timeout_s,
        test_command=HARNESS_COMMAND,
        build_command=task.spec.build_command,
        protected=task.spec.protected,
        bundle=bundle_ref,
        labels={"source": meta.source or "", "tags": ",".join(meta.tags)},
        difficulty=DIFFICULTY.get(meta.difficulty or ""),
        initial_snapshot_id=snapshot_id,
        limits=resource_limits(task),
    )


def unpack_bundle(store: ObjectStore, record: TaskPublished, folder: Path) -> Task:
    """The task of `record`, its bundle fetched from `store` (verified against its hash) and unpacked into
    `folder` (which must not exist yet); raises one of `UNUSABLE_BUNDLE` when it cannot be used."""
    data = store.get(record.bundle)
    folder.mkdir(parents=True, exist_ok=False)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        tar.extractall(folder, filter="data")
    task = load_task(folder)
    if task.id != record.task_id or task.version != record.task_version:
        raise TaskError(
            folder, f"the bundle holds {task.id} at {task.version[:12]}, not {record.task_version[:12]}"
        )
    return task
