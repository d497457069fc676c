"""Tasks as a run published them: `TaskPublished` records and their bundles in the object store.

The audit side grades with exactly the task version an episode ran against. The bundle (a deterministic
tar of the task folder, written and read by `actors.tasks.bundle`) is fetched by its hash, unpacked into a
private scratch folder (`unpack_bundle`: tarfile's `data` filter), loaded, and its content hash checked
against the recorded version; a mismatch or a missing bundle is refused with the reason
(`actors.verifier.tasks.TaskUnavailable`), never substituted. Local task folders may be given as
a fallback (`FolderTasks`), under the same exact-version rule.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from pathlib import Path

from actors.tasks.bundle import UNUSABLE_BUNDLE, unpack_bundle
from actors.tasks.spec import Task
from actors.verifier.tasks import TaskSource, TaskUnavailable
from schemas.blobs import ObjectStore
from schemas.publications import TaskPublished

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


class BundledTasks:
    """A `TaskSource` over published tasks; bundles are unpacked once each under `scratch`."""

    def __init__(
        self,
        published: Mapping[tuple[str, str], TaskPublished],
        objects: ObjectStore,
        scratch: Path,
        fallback: TaskSource | None = None,
    ) -> None:
        self.published = dict(published)
        self.objects = objects
        self.scratch = scratch
        self.fallback = fallback
        self._loaded: dict[tuple[str, str], Task] = {}
        self._lock = threading.Lock()

    def get(self, task_id: str, task_version: str) -> Task:
        key = (task_id, task_version)
        with self._lock:
            if key in self._loaded:
                return self._loaded[key]
            record = self.published.get(key)
            if record is None:
                return self._fall_back(task_id, task_version, "the run published no such task")
            try:
                task = self._unpack(record)
            except UNUSABLE_BUNDLE as exc:
                return self._fall_back(task_id, task_version, f"its bundle is unusable: {exc}")
            self._loaded[key] = task
            return task

    def _unpack(self, record: TaskPublished) -> Task:
        folder = self.scratch / f"{_SAFE_NAME.sub('_', record.task_id)}-{record.task_version[:16]}"
        return unpack_bundle(self.objects, record, folder)

    def _fall_back(self, task_id: str, task_version: str, why: str) -> Task:
        if self.fallback is not None:
            return self.fallback.get(task_id, task_version)
        raise TaskUnavailable("unknown_task", f"task {task_id} at {task_version[:12]}: {why}")
