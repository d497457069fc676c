from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from ops.cli.tasks import register

from .helpers import make_task


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trialog")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def run(*argv: str) -> int:
    args = _parser().parse_args(argv)
    code: int = args.handler(args)
    return code


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["tasks", "--help"])
    out = capsys.readouterr().out
    assert "import" in out and "decontaminate" in out
    with pytest.raises(SystemExit):
        _parser().parse_args(["tasks", "import", "--help"])
    assert "humaneval" in capsys.readouterr().out


def test_decontaminate_requires_both_sets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["tasks", "decontaminate", "--train", "x"])
    assert exited.value.code == 2
    assert "--eval" in capsys.readouterr().err


def test_decontaminate_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_task(tmp_path / "eval" / "e", task_id="e")
    make_task(tmp_path / "train" / "copy", task_id="copy")  # the same task under another id: contaminated
    assert (
        run("tasks", "decontaminate", "--train", str(tmp_path / "train"), "--eval", str(tmp_path / "eval"))
        == 1
    )
    out, err = capsys.readouterr()
    assert "FLAGGED copy" in out and "1 of 1 train tasks flagged" in out and "indexed" in err

    argv = ["tasks", "decontaminate", "--train", str(tmp_path / "train"), "--eval", str(tmp_path / "eval")]
    assert run(*argv, "--json", "--ngram", "400") == 0  # no text is 400 words long: nothing shared
    report = json.loads(capsys.readouterr().out)
    assert report["flagged"] == [] and report["ngram"] == 400 and report["train_tasks"] == 1


def test_decontaminate_malformed_task_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_task(tmp_path / "eval" / "e", task_id="e")
    broken = make_task(tmp_path / "train" / "t", task_id="t")
    (broken / "solution.patch").unlink()
    assert (
        run("tasks", "decontaminate", "--train", str(tmp_path / "train"), "--eval", str(tmp_path / "eval"))
        == 2
    )
    err = capsys.readouterr().err
    assert "trialog tasks decontaminate:" in err and "solution.patch: is missing" in err
    with pytest.raises(SystemExit) as exited:
        run("tasks", "decontaminate", "--train", str(tmp_path / "eval"), "--eval", "x", "--ngram", "0")
    assert exited.value.code == 2


def test_import_humaneval_errors_are_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "none.whl"
    bad.write_bytes(b"not a wheel")
    assert run("tasks", "import", "humaneval", "--out", str(tmp_path / "out"), "--source", str(bad)) == 2
    assert "cannot read HumanEval data" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--project", "toolz==1.2.0", "--project", "toolz==1.2.0", "--out", "x"], "named twice"),
        (["--project", "toolz==1.2.0", "--project", "toolz"], "--out DIR is required"),
        (["--project", "toolz==1.2.0", "--project", "isodate", "--out", "x"], "isodate"),
        (["--project", "toolz==1.2.0", "--name", "t", "--out", "x"], "--name goes with --repo"),
    ],
)
def test_synthesize_checks_every_project_before_fetching_any(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ops.synth_sources

    def no_fetch(*_args: object) -> None:
        raise AssertionError("nothing may be fetched before every value is checked")

    monkeypatch.setattr(ops.synth_sources, "fetch_project", no_fetch)
    assert run("tasks", "synthesize", *argv, "--json") == 2
    assert problem in json.loads(capsys.readouterr().out)["error"]


def test_manifest_refuses_a_task_that_was_not_synthesized(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_task(tmp_path / "tasks" / "hand", task_id="hand")
    assert (
        run("tasks", "manifest", str(tmp_path / "tasks"), "--out", str(tmp_path / "m.jsonl"), "--json") == 2
    )
    assert "not a synthesized task" in json.loads(capsys.readouterr().out)["error"]
    assert not (tmp_path / "m.jsonl").exists()


def test_validate_records_verdicts_and_goes_on_where_it_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from collections.abc import Callable, Iterator
    from contextlib import contextmanager

    import ops.cli.grading
    from actors.tasks.reward import Grade, Verdict
    from actors.tasks.spec import Task
    from actors.tasks.verify import Verification

    from .helpers import REPO

    graded: list[str] = []

    @contextmanager
    def verifier() -> Iterator[Callable[[Task, Path], Verification]]:
        def grade(task: Task, workspace: Path) -> Verification:
            graded.append(task.id)
            solved = (workspace / "calc.py").read_text() != REPO["calc.py"]
            failed = () if solved else task.test_ids
            verdict = Verdict.PASS if solved else Verdict.FAIL
            return Verification(
                Grade(float(solved), verdict, 0, 1, failed), 0.1, expected=task.test_ids,
                reported=task.test_ids, complete=True,
            )  # fmt: skip

        yield grade

    monkeypatch.setattr(ops.cli.grading, "_sandbox_verifier", verifier)
    for name in ("one", "two"):
        make_task(tmp_path / "tasks" / name, task_id=name)
    record = tmp_path / "record.jsonl"
    argv = [
        "tasks",
        "validate",
        str(tmp_path / "tasks"),
        "--runs",
        "2",
        "--jobs",
        "1",
        "--record",
        str(record),
    ]
    assert run(*argv, "--json") == 0
    assert len(graded) == 8 and len(record.read_text().splitlines()) == 2  # 2 tasks x 2 runs x 2 grades
    capsys.readouterr()

    record.write_text(record.read_text().splitlines()[0] + "\n" + '{"task": "two", "verd')  # cut short
    graded.clear()
    assert run(*argv, "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert (document["valid"], document["total"], document["recorded"]) == (2, 2, 1)
    assert len(graded) == 4 and set(graded) == {"two"}  # only the task not recorded ran again

    graded.clear()
    assert run(*argv[:-2], "--runs", "3", "--record", str(record), "--json") == 0
    assert len(graded) == 12  # a record of 2 runs does not stand for 3
    (tmp_path / "tasks" / "one" / "tests" / "test_extra.py").write_text("def test_x():\n    assert True\n")
    graded.clear()
    run(*argv, "--json")
    assert set(graded) == {"one"}  # a changed task (another version) is validated again
