from __future__ import annotations

from pathlib import Path


def test_a_published_task_carries_its_repo_snapshot_and_limits(tmp_path: Path) -> None:
    import dataclasses

    from actors.tasks.bundle import initial_snapshot, resource_limits, task_record
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


def test_a_bundle_is_deterministic_and_reads_back_as_the_exact_task_or_not_at_all(tmp_path: Path) -> None:
    """Writer and reader together: the same folder gives the same bytes, and unpacking them gives back the
    task of the record (same id and version); a record naming another version is refused."""
    import dataclasses

    import pytest

    from actors.tasks.bundle import BUNDLE_MEDIA_TYPE, UNUSABLE_BUNDLE, bundle, task_record, unpack_bundle
    from actors.tasks.spec import TaskError, load_task
    from ops.paths import REPO_ROOT
    from schemas.blobs import MemoryObjectStore
    from schemas.origin import Origin

    task = load_task(REPO_ROOT / "examples" / "tasks" / "easy-fix-add")
    data = bundle(task)
    assert bundle(task) == data
    store = MemoryObjectStore()
    ref = store.put(data, BUNDLE_MEDIA_TYPE)
    assert ref.media_type == BUNDLE_MEDIA_TYPE
    record = task_record(task, ref, Origin.system("t", "t"), "img")
    unpacked = unpack_bundle(store, record, tmp_path / "a")
    assert (unpacked.id, unpacked.version, unpacked.test_ids) == (task.id, task.version, task.test_ids)
    assert unpacked.root == tmp_path / "a" and bundle(unpacked) == data
    with pytest.raises(TaskError, match="not 000000000000"):
        unpack_bundle(store, dataclasses.replace(record, task_version="0" * 64), tmp_path / "b")
    with pytest.raises(UNUSABLE_BUNDLE):  # not in this store
        unpack_bundle(MemoryObjectStore(), record, tmp_path / "c")
