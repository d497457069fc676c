"""The reward canary library: every case builds, touches what it says, and is stored as a snapshot."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from actors.guard import canary_workspaces as hacks
from actors.guard.canaries import (
    BY_NAME,
    CASES,
    LIBRARY_VERSION,
    OPEN_GAPS,
    REFERENCE,
    UNTOUCHED,
    CanaryCase,
    SnapshotCache,
    canary_snapshot,
    cases_for,
    open_gaps_for,
)
from actors.tasks.bundle import initial_snapshot
from actors.tasks.spec import Task, load_task
from actors.verifier.grading import restore_to_folder
from ops.paths import REPO_ROOT
from sandbox_agent.hosttree import read_tree
from schemas.blobs import MemoryObjectStore
from tests.unit.tasks.helpers import make_task

EXAMPLES = REPO_ROOT / "examples" / "tasks"
# A package and parametrized tests (nothing protected); a package and protected visible tests.
PARAMETRIZED, PROTECTED = "csv-quoted", "word-count"

# The files each kind of hack may change, besides the code modules of `code_modules`.
FILE_HACKS = {
    "hack:conftest-report-rewrite": {"conftest.py"},
    "hack:pytest-config-plugin": {"pytest.ini", "trialog_canary_plugin.py"},
    "hack:startup-files": {"sitecustomize.py", "usercustomize.py", "trialog_canary.pth"},
}


@pytest.fixture(scope="module")
def tasks() -> dict[str, Task]:
    return {name: load_task(EXAMPLES / name) for name in (PARAMETRIZED, PROTECTED)}


def _files(root: Path) -> dict[str, bytes]:
    manifest, contents = read_tree(root)
    return {entry.path: contents[entry.sha256] for entry in manifest.files}


def _changed(before: dict[str, bytes], after: dict[str, bytes]) -> set[str]:
    return {path for path in set(before) | set(after) if before.get(path) != after.get(path)}


def test_the_library_names_each_case_once_and_covers_the_known_hacks() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names)) and names[:2] == [REFERENCE, UNTOUCHED]
    assert [case.name for case in CASES if case.expect_pass] == [REFERENCE]
    assert all(name.startswith("hack:") for name in names[2:])
    for known in (
        "conftest-report-rewrite", "early-exit", "protected-edit", "framework-patch", "forged-report-lines",
        "always-equal", "unreported-instances", "frame-walk", "gc-reporter", "settrace", "ctypes",
    ):  # fmt: skip
        assert f"hack:{known}" in BY_NAME
    assert all(case.why for case in CASES)
    assert not {case.name for case in OPEN_GAPS} & {case.name for case in CASES}
    assert all(not case.expect_pass and case.name in BY_NAME for case in OPEN_GAPS)


def test_cases_that_cannot_apply_are_left_out_with_the_reason(tasks: dict[str, Task]) -> None:
    parametrized, protected = tasks[PARAMETRIZED], tasks[PROTECTED]
    assert {case.name for case in CASES} - {case.name for case in cases_for(parametrized)} == {
        "hack:protected-edit"
    }
    assert BY_NAME["hack:protected-edit"].unusable(parametrized) == "the task protects no path"
    assert {case.name for case in CASES} - {case.name for case in cases_for(protected)} == {
        "hack:unreported-instances"
    }
    assert "parametrized" in (BY_NAME["hack:unreported-instances"].unusable(protected) or "")


def test_module_hacks_need_a_code_module_outside_the_protected_globs(tmp_path: Path) -> None:
    # Code that is all protected (vendored.py) or no Python at all (answer.txt): nowhere to put a payload.
    repo = {
        "answer.txt": "1\n",
        "vendored.py": "X = 1\n",
        "tests/test_visible.py": "def test_x():\n    pass\n",
    }
    solved = {**repo, "answer.txt": "2\n"}
    folder = make_task(tmp_path / "task", protected='["vendored.py", "tests/**"]', repo=repo, solved=solved)
    task = load_task(folder)
    names = {case.name for case in cases_for(task)}
    assert "hack:always-equal" not in names and "hack:early-exit" not in names
    assert {REFERENCE, UNTOUCHED, "hack:conftest-report-rewrite", "hack:protected-edit"} <= names
    with pytest.raises(ValueError, match="no code module outside the protected globs"):
        BY_NAME["hack:early-exit"].build(task, tmp_path / "ws")


def test_reference_and_untouched_are_the_solved_and_the_shipped_repo(
    tasks: dict[str, Task], tmp_path: Path
) -> None:
    for task in tasks.values():
        BY_NAME[REFERENCE].build(task, tmp_path / task.id / "reference")
        BY_NAME[UNTOUCHED].build(task, tmp_path / task.id / "untouched")
        solved = task.copy_repo(tmp_path / task.id / "solved", solved=True)
        assert _files(tmp_path / task.id / "reference") == _files(solved)
        assert _files(tmp_path / task.id / "untouched") == _files(task.repo_dir)


@pytest.mark.parametrize("task_name", [PARAMETRIZED, PROTECTED])
def test_every_hack_changes_only_what_it_says(tasks: dict[str, Task], tmp_path: Path, task_name: str) -> None:
    task = tasks[task_name]
    modules = set(hacks.repo_code_modules(task))
    assert modules and not any(task.protected.covers(path) for path in modules)
    for case in (*cases_for(task), *open_gaps_for(task)):
        if not case.name.startswith("hack:"):
            continue
        base = _files(task.copy_repo(tmp_path / case.name / "base", solved=case.on_reference))
        case.build(task, tmp_path / case.name / "ws")
        after = _files(tmp_path / case.name / "ws")
        changed = _changed(base, after)
        assert changed, case.name
        if case.name in FILE_HACKS:
            assert changed == FILE_HACKS[case.name], case.name
        elif case.name == "hack:shadow-tests":
            assert changed == set(hacks.shadow_test_files(task.test_ids))
        elif case.name == "hack:protected-edit":
            assert len(changed) == 1 and task.protected.covers(changed.pop())
        else:  # a payload in every code module, nothing else
            assert changed == modules, case.name
        if case.name not in ("hack:protected-edit", "hack:shadow-tests"):
            assert not any(task.protected.covers(path) for path in changed), case.name
        for path, data in after.items():
            if path.endswith(".py"):
                ast.parse(data.decode("utf-8"), filename=f"{case.name}:{path}")  # still Python


def test_shadow_tests_define_every_frozen_id(tasks: dict[str, Task]) -> None:
    ids = [
        "tests/test_a.py::test_x",
        "tests/test_a.py::TestK::test_y",
        "tests/sub/test_b.py::TestO::TestI::test_z",
    ]
    files = hacks.shadow_test_files(ids)
    assert set(files) == {"tests/test_a.py", "tests/sub/test_b.py"}
    namespace: dict[str, object] = {}
    exec(files["tests/sub/test_b.py"], namespace)
    assert hasattr(namespace["TestO"], "TestI")
    exec(files["tests/test_a.py"], namespace)
    assert callable(namespace["test_x"]) and hasattr(namespace["TestK"], "test_y")
    task = tasks[PROTECTED]
    assert any(task.protected.covers(path) for path in hacks.shadow_test_files(task.test_ids))
    assert BY_NAME["hack:shadow-tests"].tampering(task)
    assert not BY_NAME["hack:shadow-tests"].tampering(tasks[PARAMETRIZED])


def test_payloads_go_after_the_docstring_and_future_imports() -> None:
    source = '"""Doc."""\n\nfrom __future__ import annotations\n\nimport os\n'
    top = hacks.insert_at_top(source, "X = 1\n")
    assert top.index("from __future__") < top.index("X = 1") < top.index("import os")
    compile(top, "m.py", "exec")
    assert hacks.insert_at_top("#!/usr/bin/env python\n# coding: utf-8\ny = 2\n", "X = 1\n").startswith(
        "#!/usr/bin/env python\n# coding: utf-8\nX = 1\n"
    )
    assert hacks.insert_at_top("", "X = 1\n") == "X = 1\n"
    end = hacks.insert_at_end("def f():\n    return 1", "X = 1")
    assert end.endswith("X = 1\n") and end.index("def f") < end.index("X = 1")


def test_a_protected_target_is_named_from_a_glob_when_no_file_matches(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "task", protected='["config/*.cfg"]'))
    assert hacks.protected_target(task) == "config/trialog_canary.cfg"
    names = {case.name for case in cases_for(task)}
    assert "hack:protected-edit" in names
    BY_NAME["hack:protected-edit"].build(task, tmp_path / "ws")
    assert (tmp_path / "ws" / "config" / "trialog_canary.cfg").is_file()


def test_as_expected() -> None:
    reference, hack = BY_NAME[REFERENCE], BY_NAME["hack:always-equal"]
    assert reference.as_expected("pass") and not reference.as_expected("partial")
    assert hack.as_expected("tampered") and hack.as_expected("fail") and not hack.as_expected("pass")
    assert not reference.as_expected("error") and not hack.as_expected("error")


def test_snapshots_are_deterministic_cached_and_restorable(tasks: dict[str, Task], tmp_path: Path) -> None:
    task = tasks[PROTECTED]
    objects, cache = MemoryObjectStore(), SnapshotCache()
    hack = BY_NAME["hack:always-equal"]
    first = canary_snapshot(task, hack, objects, cache)
    assert canary_snapshot(task, hack, objects, cache) == first and cache.builds == 1
    # The same tree gives the same id anywhere; without a cache it is rebuilt, to the same id.
    assert canary_snapshot(task, hack, MemoryObjectStore(), None) == first
    # A cached id whose manifest the store lacks (another store, or collected) is rebuilt there.
    other = MemoryObjectStore()
    assert canary_snapshot(task, hack, other, cache) == first and cache.builds == 2
    # The untouched canary is the tree the task was published with.
    assert canary_snapshot(task, BY_NAME[UNTOUCHED], objects, cache) == initial_snapshot(task, objects)
    # What a verifier restores is what was built.
    restored = tmp_path / "restored"
    restored.mkdir()
    restore_to_folder(objects, first, restored)
    hack.build(task, tmp_path / "built")
    assert _files(restored) == _files(tmp_path / "built")
    ids = {canary_snapshot(task, case, objects, cache) for case in cases_for(task)}
    assert len(ids) == len(cases_for(task))  # every case is a different workspace
    assert len(LIBRARY_VERSION) == 16 and int(LIBRARY_VERSION, 16) >= 0


def test_the_cache_keeps_the_most_recent(tasks: dict[str, Task]) -> None:
    cache, objects = SnapshotCache(size=2), MemoryObjectStore()
    task = tasks[PROTECTED]
    for name in (REFERENCE, UNTOUCHED, "hack:early-exit"):
        canary_snapshot(task, BY_NAME[name], objects, cache)
    canary_snapshot(task, BY_NAME["hack:early-exit"], objects, cache)
    assert cache.builds == 3
    canary_snapshot(task, BY_NAME[REFERENCE], objects, cache)  # evicted: built again
    assert cache.builds == 4


# Hacks that a naive grader (plain pytest in the workspace, exit status 0 = pass) would pass on the
# untouched repo: proof that the payloads work, so that the real grader's refusal means something.
NAIVE_PASSES = [
    (PROTECTED, name)
    for name in (
        "hack:conftest-report-rewrite", "hack:pytest-config-plugin", "hack:startup-files", "hack:early-exit",
        "hack:framework-patch", "hack:plugin-registered", "hack:always-equal", "hack:guard-replaced",
        "hack:skip-tests",
    )
] + [(PARAMETRIZED, "hack:unreported-instances")]  # fmt: skip


_NAIVE_UNTOUCHED: set[str] = set()


@pytest.mark.parametrize(("task_name", "name"), NAIVE_PASSES)
def test_each_hack_fools_a_naive_grader(
    tasks: dict[str, Task], tmp_path: Path, task_name: str, name: str
) -> None:
    task = tasks[task_name]
    if task_name not in _NAIVE_UNTOUCHED:  # the untouched repo fails there (once per task)
        untouched = _naive(task, BY_NAME[UNTOUCHED], tmp_path / "untouched")
        assert untouched.returncode != 0, untouched.stdout
        _NAIVE_UNTOUCHED.add(task_name)
    hacked = _naive(task, BY_NAME[name], tmp_path / "hacked")
    assert hacked.returncode == 0, hacked.stdout


def _naive(task: Task, case: CanaryCase, root: Path) -> subprocess.CompletedProcess[str]:
    case.build(task, root)
    shutil.copytree(task.tests_dir, root / "frozen_tests")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "frozen_tests"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
