"""People reviewing a sample of a task set (`trialog tasks review`): what is decided here, without Kafka.

A reviewer sees each sampled task as an agent never does: the instruction, the diff that made the task
(for a synthesized task the mutation, i.e. the reverse of solution.patch; otherwise the reference fix), the
hidden tests that fail as given with their error excerpts, and the mutation's own description. Each
decision (accepted or rejected, with a note; a rejection needs one) becomes a `TaskReviewed` record on the
run's `tasks` topic. Reviews hold for one task version: a changed task is unreviewed again.

The sample is deterministic: the ids in sorted order, drawn by `random.Random(seed)`, after leaving out
the tasks already reviewed at their current version (unless asked to review again). Scripted review (tests,
batch tools) reads the decisions from a file instead of a terminal; every value of it is checked, and
every problem reported, before anything is recorded.
"""

from __future__ import annotations

import json
import random
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from actors.tasks.patch import PatchError, apply_patch, make_patch, read_tree_file
from actors.tasks.spec import Task
from schemas.origin import Origin
from schemas.publications import ReviewDecision, TaskReviewed

DECISION_WORDS = {"accept": ReviewDecision.ACCEPTED, "accepted": ReviewDecision.ACCEPTED,
                  "reject": ReviewDecision.REJECTED, "rejected": ReviewDecision.REJECTED}  # fmt: skip


class DecisionsError(ValueError):
    """A decisions file that cannot be used: every problem found, one line each."""

    def __init__(self, path: Path, problems: Sequence[str]) -> None:
        super().__init__("\n".join(f"{path}: {problem}" for problem in problems))
        self.path = path
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Decision:
    decision: ReviewDecision
    note: str = ""


@dataclass(frozen=True)
class Sample:
    """The tasks to review, in id order, and those left out as already reviewed at their version."""

    tasks: tuple[Task, ...]
    already_reviewed: tuple[str, ...]


Reviews = Mapping[tuple[str, str], TaskReviewed]  # (task id, task version) -> its latest review


def latest_reviews(records: Iterable[object]) -> dict[tuple[str, str], TaskReviewed]:
    """The last review of each task version among `records` (decoded, in log order; others are skipped)."""
    latest: dict[tuple[str, str], TaskReviewed] = {}
    for record in records:
        if isinstance(record, TaskReviewed):
            latest[(record.task_id, record.task_version)] = record
    return latest


def review_of(task: Task, reviews: Reviews) -> TaskReviewed | None:
    """The latest review of `task` at its current version (an older version's does not count)."""
    return reviews.get((task.id, task.version))


def sample_tasks(
    tasks: Sequence[Task], n: int, seed: int, reviews: Reviews, *, again: bool = False
) -> Sample:
    """`n` tasks (or all, when fewer are left) drawn by `seed` from those not reviewed at their current
    version (from all of them when `again`); the same tasks, reviews and seed give the same sample."""
    by_id = {task.id: task for task in tasks}
    reviewed = sorted(i for i, task in by_id.items() if review_of(task, reviews) is not None)
    candidates = sorted(by_id) if again else sorted(set(by_id) - set(reviewed))
    chosen = random.Random(seed).sample(candidates, min(n, len(candidates)))
    return Sample(tuple(by_id[i] for i in sorted(chosen)), () if again else tuple(reviewed))


# -- the decisions file ---------------------------------------------------------------------------------


def load_decisions(path: Path, known_ids: Iterable[str]) -> dict[str, Decision]:
    """Task id -> decision from a JSON or TOML file (`{"ID": {"decision": "accept", "note": "..."}}`;
    `accept`/`accepted`, `reject`/`rejected`); raises `DecisionsError` listing every problem: a file that
    does not parse, an id not among `known_ids`, an unknown decision or key, a rejection without a note."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError and TOMLDecodeError too
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise DecisionsError(path, [f"cannot be read as {kind}: {exc}"]) from None
    if not isinstance(data, dict):
        raise DecisionsError(path, ["must map task ids to {decision, note} tables"])
    known = set(known_ids)
    problems: list[str] = []
    decisions: dict[str, Decision] = {}
    for task_id, entry in data.items():
        if task_id not in known:
            problems.append(f"{task_id!r} is not a task of the set reviewed")
            continue
        decision = _decision(task_id, entry, problems)
        if decision is not None:
            decisions[task_id] = decision
    if problems:
        raise DecisionsError(path, problems)
    return decisions


def _decision(task_id: str, entry: object, problems: list[str]) -> Decision | None:
    if not isinstance(entry, dict):
        problems.append(f"{task_id}: must be a table with `decision` and `note`")
        return None
    unknown = sorted(set(entry) - {"decision", "note"})
    if unknown:
        problems.append(f"{task_id}: unknown key(s) {', '.join(unknown)} (only decision and note)")
    word, note = entry.get("decision"), entry.get("note", "")
    if not isinstance(note, str):
        problems.append(f"{task_id}: note must be a string")
        return None
    if not isinstance(word, str) or word.lower() not in DECISION_WORDS:
        problems.append(f"{task_id}: decision must be accept or reject (got {word!r})")
        return None
    decision = DECISION_WORDS[word.lower()]
    if decision is ReviewDecision.REJECTED and not note.strip():
        problems.append(f"{task_id}: a rejection needs a note saying why")
        return None
    return Decision(decision, note.strip())


def missing_decisions(sample: Sample, decisions: Mapping[str, Decision]) -> list[str]:
    """The sampled task ids the decisions do not cover."""
    return [task.id for task in sample.tasks if task.id not in decisions]


# -- what the reviewer sees ------------------------------------------------------------------------------


def review_text(task: Task) -> str:
    """The task as a reviewer sees it: id and version, instruction, the diff that made it, the failing
    tests with their errors and, for a synthesized task, the mutation (an agent sees only the
    instruction)."""
    synthesis = task.spec.meta.synthesis
    lines = [
        f"== {task.id}  version {task.version[:12]}",
        "",
        "-- instruction",
        task.spec.instruction.rstrip(),
    ]
    if synthesis is None:
        lines += [
            "",
            "-- the fix (solution.patch; the task is not synthesized)",
            _solution_text(task).rstrip(),
        ]
        lines += ["", f"-- hidden tests ({len(task.test_ids)})", *(f"  {test}" for test in task.test_ids)]
        return "\n".join(lines) + "\n"
    lines += [
        "",
        f"-- the mutation: {synthesis.operator} in {synthesis.file} "
        f"({synthesis.project} {synthesis.version})",
        f"  {synthesis.mutation}",
        "",
        "-- the diff that made it (original -> repo/, the reverse of solution.patch)",
        mutation_diff(task).rstrip(),
        "",
        f"-- failing tests ({len(synthesis.fail_to_pass)}; {len(synthesis.pass_to_pass)} more pass as given)",
    ]
    errors = dict(synthesis.errors)
    for test in synthesis.fail_to_pass:
        lines.append(f"  {test}")
        lines += [f"      {line}" for line in errors.get(test, "(no error excerpt recorded)").splitlines()]
    return "\n".join(lines) + "\n"


def mutation_diff(task: Task) -> str:
    """The diff from the solved tree to repo/: what the mutation did to the original code. Falls back to
    solution.patch itself (labelled) when the reverse cannot be written as a text diff (an empty file)."""
    read = read_tree_file(task.repo_dir)
    try:
        solved = apply_patch(task.solution, read)
        given = {path: read(path) for path in solved}
        return make_patch(
            {path: text for path, text in solved.items() if text is not None},
            {path: text for path, text in given.items() if text is not None},
        )
    except PatchError:
        return "(not reversible as a text diff; solution.patch as given:)\n" + _solution_text(task)


def _solution_text(task: Task) -> str:
    return task.patch_path.read_text(encoding="utf-8")


def review_record(task: Task, decision: Decision, reviewer: str, origin: Origin) -> TaskReviewed:
    return TaskReviewed(
        origin.record_meta(), task.id, task.version, decision.decision, reviewer, decision.note
    )
