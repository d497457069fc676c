"""Where the verifier finds a task by (id, version): a `TaskSource`.

`FolderTasks` reads local task folders (the `tasks` topic with object-store bundles can come later and
implement the same Protocol). A request names the exact version (the content hash of the task folder) it
was run against; grading it with any other version would give a reward for a different task, so a version
that is not on hand is refused with the reason, never substituted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from actors.tasks.spec import Task, TaskError, find_tasks, load_task, load_tasks


class TaskUnavailable(LookupError):
    """No task with this id and version: `reason` is `unknown_task` or `task_version_mismatch`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class TaskSource(Protocol):
    def get(self, task_id: str, task_version: str) -> Task:
        """The task at exactly this version; raises TaskUnavailable."""
        ...


class FolderTasks:
    """Tasks under local folders, loaded at start; a folder whose version changed is reloaded on demand."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = tuple(roots)
        self._lock = threading.Lock()
        self._tasks = {task.id: task for task in load_tasks(self.roots)}

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._tasks))

    @property
    def tasks(self) -> tuple[Task, ...]:
        with self._lock:
            return tuple(self._tasks.values())

    def get(self, task_id: str, task_version: str) -> Task:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None and task.version != task_version:
                task = self._reload(task)
            if task is None:
                task = self._rescan(task_id)
        if task is None:
            raise TaskUnavailable("unknown_task", f"no task {task_id!r} under {_names(self.roots)}")
        if task.version != task_version:
            raise TaskUnavailable(
                "task_version_mismatch",
                f"task {task_id!r} is at version {task.version[:12]} here, the request asks for "
                f"{task_version[:12]}",
            )
        return task

    def _reload(self, task: Task) -> Task:
        try:
            fresh = load_task(task.root)
        except TaskError:
            return task
        if fresh.id == task.id:
            self._tasks[task.id] = fresh
            return fresh
        return task

    def _rescan(self, task_id: str) -> Task | None:
        """Look for a task folder added since start (one that fails to load is skipped)."""
        known = {task.root for task in self._tasks.values()}
        for root in self.roots:
            try:
                folders = find_tasks(root)
            except TaskError:
                continue
            for folder in folders:
                if folder in known:
                    continue
                try:
                    task = load_task(folder)
                except TaskError:
                    continue
                self._tasks.setdefault(task.id, task)
        return self._tasks.get(task_id)


def _names(roots: Sequence[Path]) -> str:
    return ", ".join(str(root) for root in roots) or "no folders"
