"""A synthesized task set as a manifest: a small file that rebuilds every task folder, byte for byte.

A synthesized task is its project's release with one module mutated, that release's test files cut to the
task's tests, a solution patch and a task.toml. Given the release (an sdist from PyPI, fetched once), the
task.toml (which lists the tests) and the patch (which, reversed, gives the mutant) are all that is needed:
a few kilobytes a task instead of a copy of the project. The manifest records each task's version (the
hash of its folder), and rebuilding checks it, so a rebuilt task is the very task that was synthesized and
validated, or an error says it is not (a different cut of the tests, a different release).

The file is JSON lines, gzip-compressed when its name ends in `.gz`: one header line
(`{"trialog_task_manifest": 1, ...}`), then one object per task.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from actors.tasks.patch import PatchError, apply_patch, reverse_patch
from actors.tasks.spec import PATCH_FILE, TASK_FILE, Task, TaskError, parse_spec, task_version
from actors.tasks.synth.project import Project
from actors.tasks.synth.writer import build_folder

FORMAT = 1
_FIELDS = ("project", "id", "version", "task_toml", "solution_patch")


class ManifestError(ValueError):
    """A manifest that cannot be read, a task that cannot go in one, or a rebuild that does not match."""


@dataclass(frozen=True)
class ManifestEntry:
    project: str  # NAME==VERSION of the release the task was made from
    task_id: str
    version: str  # the task folder's content hash when it was synthesized
    task_toml: str
    solution_patch: str

    def to_json(self) -> dict[str, str]:
        return {
            "project": self.project,
            "id": self.task_id,
            "version": self.version,
            "task_toml": self.task_toml,
            "solution_patch": self.solution_patch,
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ManifestEntry:
        if not isinstance(data, dict) or not all(isinstance(data.get(name), str) for name in _FIELDS):
            raise ManifestError(f"{where}: a task entry needs the text fields {', '.join(_FIELDS)}")
        return cls(data["project"], data["id"], data["version"], data["task_toml"], data["solution_patch"])

    @property
    def release(self) -> tuple[str, str]:
        name, _, version = self.project.partition("==")
        return name, version


def entry_of(task: Task) -> ManifestEntry:
    """The manifest entry of a synthesized task folder (its task.toml and patch as they are on disk)."""
    synthesis = task.spec.meta.synthesis
    if synthesis is None:
        raise ManifestError(f"{task.root}: not a synthesized task (no [meta.synthesis])")
    return ManifestEntry(
        project=f"{synthesis.project}=={synthesis.version}",
        task_id=task.id,
        version=task.version,
        task_toml=(task.root / TASK_FILE).read_text(),
        solution_patch=(task.root / PATCH_FILE).read_text(),
    )


def write_manifest(path: Path, entries: Iterable[ManifestEntry]) -> int:
    """Write the manifest (gzip when `path` ends in .gz); returns how many tasks it holds."""
    listed = sorted(entries, key=lambda entry: (entry.project, entry.task_id))
    header = {
        "trialog_task_manifest": FORMAT,
        "tasks": len(listed),
        "projects": sorted({entry.project for entry in listed}),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    with _open(partial, "wt", compressed=path.name.endswith(".gz")) as out:
        out.write(json.dumps(header) + "\n")
        for entry in listed:
            out.write(json.dumps(entry.to_json(), sort_keys=True) + "\n")
    partial.replace(path)
    return len(listed)


def read_manifest(path: Path) -> list[ManifestEntry]:
    try:
        with _open(path, "rt", compressed=path.name.endswith(".gz")) as lines:
            return list(_entries(lines, path))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot be read: {exc}") from None


def _entries(lines: IO[str], path: Path) -> Iterator[ManifestEntry]:
    header = _json(lines.readline(), f"{path}:1")
    if not isinstance(header, dict) or header.get("trialog_task_manifest") != FORMAT:
        raise ManifestError(f"{path}: not a trialog task manifest (format {FORMAT}): its first line says so")
    seen: set[str] = set()
    for number, line in enumerate(lines, start=2):
        if not line.strip():
            continue
        entry = ManifestEntry.from_json(_json(line, f"{path}:{number}"), f"{path}:{number}")
        if entry.task_id in seen:
            raise ManifestError(f"{path}:{number}: task {entry.task_id} is listed twice")
        seen.add(entry.task_id)
        yield entry
    if len(seen) != header.get("tasks"):
        count = header.get("tasks")
        raise ManifestError(f"{path}: the header says {count} tasks, the file holds {len(seen)} (cut short?)")


def _json(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{where}: not JSON ({exc.msg})") from None


def _open(path: Path, mode: str, *, compressed: bool) -> IO[str]:
    if compressed:
        return gzip.open(path, mode, encoding="utf-8")  # type: ignore[return-value]
    return path.open(mode[0], encoding="utf-8")


def materialize(entry: ManifestEntry, project: Project, out: Path) -> Path:
    """Rebuild the entry's task folder under `out` from its release, and check it is the same task (its
    version). A folder of that id already there is replaced only by a matching rebuild."""
    if project.source != entry.project:
        raise ManifestError(f"{entry.task_id}: made from {entry.project}, not {project.source}")
    where = out / entry.task_id / TASK_FILE
    try:
        spec = parse_spec(tomllib.loads(entry.task_toml), where)
    except (tomllib.TOMLDecodeError, TaskError) as exc:
        raise ManifestError(f"{entry.task_id}: its task.toml does not load: {exc}") from None
    synthesis = spec.meta.synthesis
    if spec.id != entry.task_id or synthesis is None:
        raise ManifestError(f"{entry.task_id}: its task.toml is not that synthesized task's")
    original = project.files.get(synthesis.file)
    if original is None:
        raise ManifestError(f"{entry.task_id}: {project.source} has no {synthesis.file}")
    try:
        undone = apply_patch(reverse_patch(entry.solution_patch), {synthesis.file: original.decode()}.get)
    except (PatchError, UnicodeDecodeError) as exc:
        problem = f"its patch does not undo onto {synthesis.file}: {exc}"
        raise ManifestError(f"{entry.task_id}: {problem}") from None
    mutant = undone.get(synthesis.file)
    if mutant is None or set(undone) != {synthesis.file}:
        raise ManifestError(f"{entry.task_id}: its patch must change {synthesis.file} and nothing else")
    staging = out / f".{entry.task_id}.partial"
    tests = [*synthesis.fail_to_pass, *synthesis.pass_to_pass]
    build_folder(
        staging, project, synthesis.file, mutant.encode(), tests, entry.solution_patch, entry.task_toml
    )
    rebuilt = task_version(staging)
    if rebuilt != entry.version:
        shutil.rmtree(staging)
        raise ManifestError(
            f"{entry.task_id}: the rebuilt folder is not the task synthesized (version {rebuilt[:12]}, "
            f"the manifest says {entry.version[:12]}): its release's files or the cut of its tests differ"
        )
    folder = out / entry.task_id
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)
    return folder
