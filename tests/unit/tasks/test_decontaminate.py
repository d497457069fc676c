from __future__ import annotations

from pathlib import Path

from actors.tasks.decontaminate import decontaminate, ngrams, tokenize
from actors.tasks.spec import Task, load_task

from .helpers import REPO, SOLVED, TASK_TOML, TESTS, make_task

SHARED = "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat"  # 17 words


def _task(root: Path, task_id: str, *, instruction: str = "Make add() add.", extra_code: str = "") -> Task:
    toml = TASK_TOML.format(id=task_id, protected="[]").replace("Make add() add.", instruction)
    repo = {**REPO, "notes.py": f"# {task_id}\n{extra_code}\n"}
    solved = {**SOLVED, "notes.py": repo["notes.py"]}
    # Tests of their own (fewer than 13 words), so that only what a test puts in common is shared.
    tests = {"test_calc.py": f"from calc import add\n\n\ndef test_{task_id}():\n    assert add(2, 3) == 5\n"}
    return load_task(make_task(root / task_id, toml=toml, repo=repo, solved=solved, tests=tests))


def test_tokens_ignore_case_punctuation_and_layout() -> None:
    assert tokenize("def Add(a,b):\n    return a+b") == ["def", "add", "a", "b", "return", "a", "b"]
    assert list(ngrams(["a", "b", "c"], 2)) == [("a", "b"), ("b", "c")]
    assert list(ngrams(["a"], 2)) == []


def test_shared_instruction_is_flagged(tmp_path: Path) -> None:
    eval_task = _task(tmp_path / "eval", "e", instruction=f"Please: {SHARED.upper()}!")
    copied = _task(tmp_path / "train", "copied", instruction=f"{SHARED}, then fix add().")
    clean = _task(tmp_path / "train", "clean", instruction="Something else entirely.")
    report = decontaminate([copied, clean], [eval_task])
    assert [f.task for f in report.flagged] == ["copied"]
    match = report.flagged[0].matches[0]
    assert (match.field, match.eval_task, match.eval_field) == ("instruction", "e", "instruction")
    assert match.shared_ngrams == 17 - 13 + 1
    assert match.example == " ".join(SHARED.split()[:13])
    assert not report.clean


def test_fields_are_compared_across(tmp_path: Path) -> None:
    # Eval hidden tests pasted into a train task's code is contamination too.
    leaked = "\n".join(f"    assert add({i}, {i + 1}) == {2 * i + 1}" for i in range(6))
    eval_tests = {"test_calc.py": TESTS["test_calc.py"] + f"\n\ndef test_more():\n{leaked}\n"}
    eval_task = load_task(make_task(tmp_path / "eval" / "e", task_id="e", tests=eval_tests))
    train = _task(tmp_path / "train", "t", extra_code=f"def check():\n{leaked}\n")
    report = decontaminate([train], [eval_task])
    fields = {(m.field, m.eval_field) for m in report.flagged[0].matches}
    assert ("code", "tests") in fields


def test_ngram_length_is_the_threshold(tmp_path: Path) -> None:
    words = SHARED.split()[:10]
    eval_task = _task(tmp_path / "eval", "e", instruction=" ".join(words))
    train = _task(tmp_path / "train", "t", instruction=" ".join(words) + " and more")
    assert decontaminate([train], [eval_task]).clean  # 10 shared words < 13
    assert not decontaminate([train], [eval_task], n=10).clean


def test_boilerplate_shared_by_many_eval_tasks_is_ignored(tmp_path: Path) -> None:
    evals = [_task(tmp_path / "eval", f"e{i}", instruction=f"{SHARED} number {i}") for i in range(4)]
    train = _task(tmp_path / "train", "t", instruction=SHARED)
    assert not decontaminate([train], evals, max_common=4).clean
    report = decontaminate([train], evals, max_common=3)
    assert report.clean and report.boilerplate_ngrams > 0
