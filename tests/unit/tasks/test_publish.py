from __future__ import annotations

from pathlib import Path


def test_a_published_task_carries_its_repo_snapshot_and_limits(tmp_path: Path) -> None:
    import dataclasses

    from actors.tasks.publish import initial_snapshot, resource_limits, task_record
    from actors.tasks.spec import TaskLimits, load_task
    from ops.paths import REPO_ROOT
    from sandbox_agent.hosttree import read_tree
    from sandbox_agent.manifest import SnapshotId
    from sandbox_agent.snapshots import SnapshotStore
    from schemas.blobs import BlobRef, LocalObjectStore
    from schemas.common import Producer
    from schemas.origin import FixedClock, Origin, SequentialIds
    from streams.rows import task_info

    task = load_task(REPO_ROOT / "examples" / "tasks" / "easy-fix-range")
    store = LocalObjectStore(tmp_path / "objects")
    snapshot = initial_snapshot(task, store)
    assert initial_snapshot(task, store) == snapshot  # content-addressed: same tree, same id
    restored = SnapshotStore(store).load(SnapshotId.parse(snapshot))
    assert restored == read_tree(task.repo_dir)[0]
    assert resource_limits(task) is None
    limited = dataclasses.replace(task, spec=dataclasses.replace(task.spec, limits=TaskLimits(pids=64)))
    limits = resource_limits(limited)
    assert limits is not None and limits.pids == 64

    origin = Origin(Producer("test", "1"), FixedClock(), SequentialIds())
    info = task_info(task_record(limited, BlobRef.of(b"x"), origin, "img", snapshot))
    assert (info.initial_snapshot_id, info.limits) == (snapshot, limits)
