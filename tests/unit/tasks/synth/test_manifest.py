"""A synthesized task set written as a manifest rebuilds the very same folders, or says why not."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from actors.tasks.spec import load_task
from actors.tasks.synth.manifest import (
    ManifestEntry,
    ManifestError,
    entry_of,
    materialize,
    read_manifest,
    write_manifest,
)
from actors.tasks.synth.project import Project, load_project
from actors.tasks.synth.writer import Kept, write_task

CORE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = (
    "from lib.core import add, sub\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
    "def test_sub():\n    assert sub(3, 1) == 2\n\n\ndef test_other():\n    assert add(0, 0) == 0\n"
)


def project_at(root: Path, version: str = "1.0") -> Project:
    files = {"lib/__init__.py": "", "lib/core.py": CORE, "tests/test_core.py": TESTS}
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return load_project(root, "lib", version)


def kept(key: str, mutant: str, failing: str) -> Kept:
    return Kept(
        key=key,
        operator="binary-op",
        path="lib/core.py",
        mutant=mutant.encode(),
        mutation="`+` -> `-`",
        fail_to_pass=(f"tests/test_core.py::{failing}",),
        pass_to_pass=("tests/test_core.py::test_other",),
        errors=((f"tests/test_core.py::{failing}", "assert -1 == 3"),),
        instruction=f"Make {failing} pass.",
        timeout_s=60.0,
    )


@pytest.fixture
def made(tmp_path: Path) -> tuple[Project, list[Path]]:
    project = project_at(tmp_path / "src")
    folders = [
        write_task(project, kept("a", CORE.replace("a + b", "a - b"), "test_add"), tmp_path / "tasks"),
        write_task(project, kept("b", CORE.replace("a - b", "a + b"), "test_sub"), tmp_path / "tasks"),
    ]
    return project, folders


@pytest.mark.parametrize("name", ["set.jsonl", "set.jsonl.gz"])
def test_a_manifest_rebuilds_the_same_task_folders(
    made: tuple[Project, list[Path]], tmp_path: Path, name: str
) -> None:
    project, folders = made
    tasks = [load_task(folder) for folder in folders]
    assert write_manifest(tmp_path / name, [entry_of(task) for task in tasks]) == 2
    if name.endswith(".gz"):
        with gzip.open(tmp_path / name) as compressed:
            assert compressed.read(1) == b"{"
    entries = read_manifest(tmp_path / name)
    assert [entry.task_id for entry in entries] == sorted(task.id for task in tasks)
    for entry in entries:
        rebuilt = load_task(materialize(entry, project, tmp_path / "rebuilt"))
        original = next(task for task in tasks if task.id == entry.task_id)
        assert rebuilt.version == original.version == entry.version
        assert rebuilt.test_ids == original.test_ids


def test_a_rebuild_that_is_not_the_task_synthesized_is_refused(
    made: tuple[Project, list[Path]], tmp_path: Path
) -> None:
    project, folders = made
    entry = entry_of(load_task(folders[0]))
    changed = project_at(tmp_path / "other", version="1.0")  # the same release, a test file edited
    changed.files["tests/test_core.py"] += b"\n\ndef test_more():\n    assert True\n"
    with pytest.raises(ManifestError, match="not the task synthesized"):
        materialize(entry, changed, tmp_path / "rebuilt")
    assert list((tmp_path / "rebuilt").iterdir()) == []  # nothing half-written is left
    with pytest.raises(ManifestError, match=r"made from lib==1\.0, not lib==2\.0"):
        materialize(entry, project_at(tmp_path / "v2", version="2.0"), tmp_path / "rebuilt")
    broken = ManifestEntry(entry.project, entry.task_id, entry.version, entry.task_toml, "--- a/x\n+++ b/x\n")
    with pytest.raises(ManifestError, match="patch"):
        materialize(broken, project, tmp_path / "rebuilt")


def test_bad_manifests_say_what_is_wrong(made: tuple[Project, list[Path]], tmp_path: Path) -> None:
    _, folders = made
    entry = entry_of(load_task(folders[0])).to_json()
    header = {"trialog_task_manifest": 1, "tasks": 1}
    cases = {
        "not-json": "{\n",
        "no-header": json.dumps(entry) + "\n",
        "short": json.dumps({**header, "tasks": 2}) + "\n" + json.dumps(entry) + "\n",
        "twice": json.dumps({**header, "tasks": 2}) + "\n" + (json.dumps(entry) + "\n") * 2,
        "field": json.dumps(header) + "\n" + json.dumps({**entry, "version": 7}) + "\n",
    }
    messages = {
        "not-json": "not JSON",
        "no-header": "not a trialog task manifest",
        "short": "the header says 2 tasks, the file holds 1",
        "twice": "listed twice",
        "field": "needs the text fields",
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ManifestError, match=messages[name]):
            read_manifest(tmp_path / name)
    (tmp_path / "bad.gz").write_bytes(b"not gzip")
    with pytest.raises(ManifestError, match="cannot be read"):
        read_manifest(tmp_path / "bad.gz")
