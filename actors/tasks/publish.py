"""Put validated tasks on the compacted `tasks` topic: a `TaskPublished` record keyed by task id.

The task folder travels as a deterministic tarball in the object store (`bundle`), so any worker that reads
the store can grade against exactly the version that was validated; repo/ is also stored as a workspace
snapshot (`initial_snapshot_id`), the tree an episode's first step restores.
"""

from __future__ import annotations

import io
import socket
import tarfile
from collections.abc import Sequence
from pathlib import Path

from actors.tasks.spec import Task, TaskLimits, load_task
from actors.tasks.verify import task_quotas
from sandbox_agent.limits import MIB
from schemas.blobs import BlobRef, ObjectStore
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.requests import ResourceLimits
from schemas.topics import TASKS
from streams.errors import StackError
from streams.kafka.topics import ensure_topics

BUNDLE_MEDIA_TYPE = "application/x-tar"
HARNESS_COMMAND = "python3 -I trialog_launch.py /workspace"  # see actors.tasks.verify
DIFFICULTY = {"easy": 0.25, "medium": 0.5, "hard": 0.75}


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


def publish_tasks(
    folders: Sequence[Path], bootstrap: str, store: ObjectStore, image: str, *, run: str = ""
) -> list[str]:
    """Publish each task, its bundle and initial snapshot put in `store`, to be run on `image`; returns the
    published ids. Re-publishing a task replaces it (compaction)."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    from schemas.kafka_serde import AvroSerializer

    origin = Origin.system("tasks-publisher", socket.gethostname())
    try:
        ensure_topics(bootstrap, run)
        producer = KafkaProducer(bootstrap_servers=bootstrap, value_serializer=AvroSerializer())
    except KafkaError as exc:
        raise StackError(
            f"Kafka at {bootstrap} is not reachable: {exc}", "start the stack: trialog up"
        ) from exc
    published = []
    try:
        for folder in folders:
            task = load_task(folder)
            ref = store.put(bundle(task), BUNDLE_MEDIA_TYPE)
            record = task_record(task, ref, origin, image, initial_snapshot(task, store))
            producer.send(TASKS.of(run), key=task.id.encode(), value=record).get(timeout=30)
            published.append(task.id)
    finally:
        producer.close()
    return published
