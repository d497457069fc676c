"""Tasks read back from their published bundles, and the store re-executions write into."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.tasks.bundle import BUNDLE_MEDIA_TYPE, bundle, task_record
from actors.tasks.spec import load_task
from actors.verifier.tasks import FolderTasks, TaskUnavailable
from ops.audit_sandboxes import OverlayStore
from ops.bundled_tasks import BundledTasks
from ops.paths import REPO_ROOT
from schemas.blobs import MemoryObjectStore
from schemas.origin import Origin
from schemas.publications import TaskPublished

EXAMPLE = REPO_ROOT / "examples" / "tasks" / "easy-fix-add"


def _published(store: MemoryObjectStore) -> dict[tuple[str, str], TaskPublished]:
    task = load_task(EXAMPLE)
    record = task_record(task, store.put(bundle(task), BUNDLE_MEDIA_TYPE), Origin.system("t", "t"), "img")
    return {(task.id, task.version): record}


def test_a_published_bundle_gives_back_the_exact_task_version(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    original = load_task(EXAMPLE)
    tasks = BundledTasks(_published(store), store, tmp_path)
    task = tasks.get(original.id, original.version)
    assert task.version == original.version and task.test_ids == original.test_ids
    assert task.root.is_relative_to(tmp_path)  # unpacked in the scratch folder, not read from examples/
    assert tasks.get(original.id, original.version) is task  # unpacked once


def test_an_unknown_version_or_a_missing_bundle_is_refused_unless_a_folder_has_it(tmp_path: Path) -> None:
    original = load_task(EXAMPLE)
    published = _published(MemoryObjectStore())
    empty = MemoryObjectStore()  # the bundle is not in this store
    with pytest.raises(TaskUnavailable, match="no such task"):
        BundledTasks(published, empty, tmp_path / "a").get(original.id, "0" * 64)
    with pytest.raises(TaskUnavailable, match="bundle is unusable"):
        BundledTasks(published, empty, tmp_path / "b").get(original.id, original.version)
    fallback = FolderTasks([EXAMPLE])
    tasks = BundledTasks(published, empty, tmp_path / "c", fallback)
    assert tasks.get(original.id, original.version).root == EXAMPLE


def test_the_overlay_reads_through_and_writes_only_to_itself() -> None:
    base = MemoryObjectStore()
    old = base.put(b"recorded")
    overlay = OverlayStore(base)
    new = overlay.put(b"reproduced")
    assert overlay.get(old) == b"recorded" and overlay.get(new) == b"reproduced"
    assert not base.contains(new.sha256) and overlay.contains(new.sha256) and overlay.contains(old.sha256)
    overlay.put(b"recorded")
    assert not overlay.scratch.contains(old.sha256)  # already in the audited store: not copied
