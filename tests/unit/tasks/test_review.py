"""`trialog tasks review` without Kafka: sampling, the decisions file, what the reviewer sees, the prompt,
the errors given before any service is touched, and the readers of the `tasks` topic skipping reviews."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from actors.tasks.review import (
    Decision,
    DecisionsError,
    latest_reviews,
    load_decisions,
    missing_decisions,
    mutation_diff,
    review_record,
    review_text,
    sample_tasks,
)
from actors.tasks.spec import Task, load_task, load_tasks
from ops.cli.review import Quit, ask_decision
from ops.cli.tasks import register
from schemas.codec import default_codec
from schemas.publications import ReviewDecision, TaskReviewed, review_key
from tests.unit.actors.requests import fixed_origin

from .helpers import make_task
from .review_helpers import make_set, make_synthesized

ACCEPT, REJECT = Decision(ReviewDecision.ACCEPTED, "fine"), Decision(ReviewDecision.REJECTED, "trivial")


def _tasks(tmp_path: Path, count: int) -> list[Task]:
    return [load_task(make_task(tmp_path / f"t{i:02}", task_id=f"t{i:02}")) for i in range(count)]


def _reviewed(task: Task, decision: Decision = ACCEPT, version: str | None = None) -> TaskReviewed:
    record = review_record(task, decision, "ada", fixed_origin("task-review"))
    return TaskReviewed(record.meta, task.id, version or task.version, record.decision, "ada", record.note)


# -- sampling -----------------------------------------------------------------------------------------------


def test_the_sample_is_drawn_by_the_seed_and_sorted(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, 10)
    first = sample_tasks(tasks, 4, seed=1, reviews={})
    assert [t.id for t in first.tasks] == [t.id for t in sample_tasks(list(reversed(tasks)), 4, 1, {}).tasks]
    assert [t.id for t in first.tasks] == sorted(t.id for t in first.tasks) and len(first.tasks) == 4
    others = {tuple(t.id for t in sample_tasks(tasks, 4, seed, {}).tasks) for seed in range(2, 8)}
    assert len(others) > 1  # the seed decides
    assert len(sample_tasks(tasks, 50, seed=1, reviews={}).tasks) == 10  # all, when fewer are there


def test_tasks_reviewed_at_their_version_are_left_out_unless_again(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, 3)
    reviews = latest_reviews([_reviewed(tasks[0]), _reviewed(tasks[1], version="an-older-version")])
    sample = sample_tasks(tasks, 3, seed=0, reviews=reviews)
    assert [t.id for t in sample.tasks] == ["t01", "t02"]  # t01's review was of another version
    assert sample.already_reviewed == ("t00",)
    again = sample_tasks(tasks, 3, seed=0, reviews=reviews, again=True)
    assert [t.id for t in again.tasks] == ["t00", "t01", "t02"] and again.already_reviewed == ()


def test_the_latest_review_of_a_version_counts(tmp_path: Path) -> None:
    (task,) = _tasks(tmp_path, 1)
    reviews = latest_reviews([_reviewed(task, REJECT), "not a review", _reviewed(task, ACCEPT)])
    assert reviews[(task.id, task.version)].decision is ReviewDecision.ACCEPTED
    assert review_key("t00", "abc") == b"review/t00/abc"


# -- the decisions file -------------------------------------------------------------------------------------


def test_decisions_from_json_and_toml(tmp_path: Path) -> None:
    as_json = tmp_path / "d.json"
    as_json.write_text(
        json.dumps({"a": {"decision": "accept"}, "b": {"decision": "rejected", "note": " dull "}})
    )
    assert load_decisions(as_json, ["a", "b", "c"]) == {
        "a": Decision(ReviewDecision.ACCEPTED, ""),
        "b": Decision(ReviewDecision.REJECTED, "dull"),
    }
    as_toml = tmp_path / "d.toml"
    as_toml.write_text('[a]\ndecision = "Accept"\nnote = "ok"\n')
    assert load_decisions(as_toml, ["a"]) == {"a": Decision(ReviewDecision.ACCEPTED, "ok")}


def test_every_problem_of_a_decisions_file_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(
        json.dumps(
            {
                "typo": {"decision": "accept"},
                "a": {"decision": "maybe"},
                "b": {"decision": "reject"},
                "c": {"decision": "accept", "notes": "x"},
                "d": "accept",
            }
        )
    )
    with pytest.raises(DecisionsError) as raised:
        load_decisions(path, ["a", "b", "c", "d"])
    assert raised.value.problems == (
        "'typo' is not a task of the set reviewed",
        "a: decision must be accept or reject (got 'maybe')",
        "b: a rejection needs a note saying why",
        "c: unknown key(s) notes (only decision and note)",
        "d: must be a table with `decision` and `note`",
    )
    path.write_text("{not json")
    with pytest.raises(DecisionsError, match="cannot be read as JSON"):
        load_decisions(path, [])


def test_a_sampled_task_without_a_decision_is_missing(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, 3)
    sample = sample_tasks(tasks, 3, seed=0, reviews={})
    assert missing_decisions(sample, {"t00": ACCEPT}) == ["t01", "t02"]


# -- what the reviewer sees ---------------------------------------------------------------------------------


def test_a_synthesized_task_shows_instruction_mutation_diff_and_failing_tests(tmp_path: Path) -> None:
    task = load_task(make_synthesized(tmp_path / "s"))
    text = review_text(task)
    assert text.startswith(f"== calc-synth  version {task.version[:12]}")
    assert "Make add() add." in text
    assert "-- the mutation: swap-binary-operator in calc.py (calclib 1.2.0)" in text
    assert "`+` -> `-` in `add`" in text
    # The diff that made the task goes from the original (solved) code to repo/: the reverse of the fix.
    assert "-    return a + b\n+    return a - b" in mutation_diff(task)
    assert "-    return a + b\n+    return a - b" in text
    assert "  tests/test_calc.py::test_add\n      assert -1 == 5\n       +  where -1 = add(2, 3)" in text
    assert "failing tests (1; 1 more pass as given)" in text


def test_a_plain_task_shows_its_fix_labelled_as_such(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "p"))
    text = review_text(task)
    assert "the fix (solution.patch; the task is not synthesized)" in text
    assert "-    return a - b\n+    return a + b" in text
    assert "tests/test_calc.py::test_add" in text and "mutation" not in text


# -- the prompt ---------------------------------------------------------------------------------------------


def _asker(*answers: str) -> tuple[list[str], Callable[[str], str]]:
    shown: list[str] = []
    pending = list(answers)

    def ask(prompt: str) -> str:
        if not pending:
            raise EOFError
        return pending.pop(0)

    return shown, ask


def test_the_prompt_asks_until_it_has_an_answer_and_a_note_for_a_rejection() -> None:
    shown, ask = _asker("x", "r", "", "too easy")
    assert ask_decision(ask, shown.append) == Decision(ReviewDecision.REJECTED, "too easy")
    assert shown == ["answer a, r, s or q (not 'x')", "a rejection needs a note"]
    assert ask_decision(_asker("a", "")[1], print) == Decision(ReviewDecision.ACCEPTED, "")
    assert ask_decision(_asker("s")[1], print) is None
    for answers in (("q",), ()):  # quit, or the end of input
        with pytest.raises(Quit):
            ask_decision(_asker(*answers)[1], print)


# -- the command, before any service ------------------------------------------------------------------------


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="trialog")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


NO_KAFKA = ("--bootstrap", "127.0.0.1:1")  # nothing listens: a command that got this far would say so


def test_without_a_terminal_the_decisions_file_is_required(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_set(tmp_path / "set")
    assert _run("tasks", "review", str(tmp_path / "set"), "--sample", "2", *NO_KAFKA, "--json") == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"] == "no terminal to ask at" and "--decisions FILE" in err


def test_a_bad_decisions_file_is_reported_before_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_set(tmp_path / "set")
    decisions = tmp_path / "d.json"
    decisions.write_text(json.dumps({"calc-0": {"decision": "reject"}, "nope": {"decision": "accept"}}))
    argv = ("tasks", "review", str(tmp_path / "set"), "--sample", "2", "--decisions", str(decisions))
    assert _run(*argv, *NO_KAFKA) == 2
    err = capsys.readouterr().err
    assert "calc-0: a rejection needs a note" in err and "'nope' is not a task" in err
    assert "2 problems in" in err and "nothing was recorded" in err and "Kafka" not in err


def test_a_malformed_task_set_is_reported_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = make_task(tmp_path / "set" / "b", task_id="b")
    (broken / "solution.patch").unlink()
    assert _run("tasks", "review", str(tmp_path / "set"), "--sample", "1", *NO_KAFKA) == 2
    assert "solution.patch: is missing" in capsys.readouterr().err


def test_the_sample_size_and_reviewer_are_checked_when_parsed(tmp_path: Path) -> None:
    for bad in (("--sample", "0"), ("--sample", "1", "--reviewer", " ")):
        with pytest.raises(SystemExit):
            _run("tasks", "review", str(tmp_path), *bad)


# -- readers of the tasks topic skip reviews ----------------------------------------------------------------


def test_the_readers_of_the_tasks_topic_skip_reviews(tmp_path: Path) -> None:
    from actors.guard.core import Guard
    from actors.scheduler.core import Target
    from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
    from ops.audit import LogRecord
    from ops.run_bundle import LogContents
    from ops.runlog import LoggedRun
    from streams.rows import TaskCache

    (task,) = load_tasks([make_task(tmp_path / "t", task_id="t")])
    review = _reviewed(task, REJECT)
    data = default_codec().encode(review)

    process = SchedulerProcess(SchedulerSettings("unused", Target("r", 1)), fixed_origin("s"), say=print)
    process.observe(review)
    assert process.state.tasks == {}
    guard = Guard("r", fixed_origin("guard"), {})
    assert guard.observe("tasks", review) == [] and guard.state.tasks == {}
    cache = TaskCache("unused", "tasks")
    cache.add(data)
    assert cache.tasks == {}
    logged = LoggedRun()
    record = LogRecord("tasks", 0, 0, review_key(task.id, task.version), data)
    logged.add(record, default_codec())
    assert logged.tasks == {} and logged.undecodable == 0
    contents = LogContents()
    contents.add("r", record, default_codec())
    assert contents.tasks == {} and not contents.undecodable


def test_a_session_records_what_was_decided_before_a_quit(tmp_path: Path) -> None:
    from ops.cli.review import _decide

    tasks = tuple(_tasks(tmp_path, 3))
    shown, ask = _asker("r", "dull", "q")
    made, skipped = _decide(tasks, None, "ada", shown.append, ask)
    assert [(r.task_id, r.decision, r.note, r.reviewer) for r in made] == [
        ("t00", ReviewDecision.REJECTED, "dull", "ada")
    ]
    assert skipped == ["t01", "t02"]
    assert shown[0].startswith("[1/3] == t00") and "t00: rejected (dull)" in shown
