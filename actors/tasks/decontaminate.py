"""`trialog tasks decontaminate`: flag train tasks that share long token n-grams with eval tasks.

A train task is flagged when any of its texts (instruction, code in repo/, frozen tests, solution) shares an
n-gram of `n` tokens (13 by default, as in the GPT-3 contamination study) with any text of any eval task.
Comparing every field with every field is deliberate: an eval task's hidden tests showing up in a train
task's code is contamination as much as a copied instruction is.

Tokens are words (runs of letters, digits and `_`), lowercased; punctuation and layout are dropped, so that
reformatting does not hide a copy, and so that 13 tokens are 13 words (with punctuation as tokens, a list
literal such as `([1, 2, 3, 4]) ==` is already 13 tokens long and matches everywhere). N-grams never span
two files. N-grams found in more than `max_common` eval tasks are boilerplate (a license header, the
template an importer wrote into every task) rather than content, and are ignored. The eval index holds the
n-grams themselves (exact matches, no hash collisions); for much larger eval sets, hash them instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.tasks.spec import Task

DEFAULT_N = 13
DEFAULT_MAX_COMMON = 10
MAX_FILE_BYTES = 1 << 20  # larger files are data, not code worth comparing
FIELDS = ("instruction", "code", "tests", "solution")
_TOKEN = re.compile(r"\w+")

NGram = tuple[str, ...]


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def ngrams(tokens: Sequence[str], n: int) -> Iterator[NGram]:
    for start in range(len(tokens) - n + 1):
        yield tuple(tokens[start : start + n])


def task_texts(task: Task) -> Iterator[tuple[str, str]]:
    """(field, text) pairs of a task; one per file for code and tests, one per hunk for the solution."""
    yield "instruction", task.spec.instruction
    for name, folder in (("code", task.repo_dir), ("tests", task.tests_dir)):
        for path in sorted(folder.rglob("*")):
            text = _read_text(path)
            if text is not None:
                yield name, text
    for file in task.solution:
        for hunk in file.hunks:
            yield "solution", "".join(hunk.side("+"))


def _read_text(path: Path) -> str | None:
    if path.is_symlink() or not path.is_file() or "__pycache__" in path.parts:
        return None
    if path.stat().st_size > MAX_FILE_BYTES:
        return None
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return None  # binary files carry no tokens worth comparing


@dataclass
class Match:
    field: str
    eval_task: str
    eval_field: str
    shared_ngrams: int = 0
    example: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "eval_task": self.eval_task,
            "eval_field": self.eval_field,
            "shared_ngrams": self.shared_ngrams,
            "example": self.example,
        }


@dataclass
class Flagged:
    task: str
    path: str
    matches: list[Match] = field(default_factory=list)


@dataclass
class Report:
    n: int
    train_tasks: int
    eval_tasks: int
    flagged: list[Flagged]
    boilerplate_ngrams: int = 0

    @property
    def clean(self) -> bool:
        return not self.flagged

    def as_dict(self) -> dict[str, Any]:
        return {
            "ngram": self.n,
            "train_tasks": self.train_tasks,
            "eval_tasks": self.eval_tasks,
            "boilerplate_ngrams": self.boilerplate_ngrams,
            "flagged_count": len(self.flagged),
            "flagged": [
                {"task": f.task, "path": f.path, "matches": [m.as_dict() for m in f.matches]}
                for f in self.flagged
            ],
        }


class EvalIndex:
    """Every n-gram of the eval tasks, with the (task, field) pairs it occurs in."""

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ValueError(f"n-gram length must be at least 1 (got {n})")
        self.n = n
        self.owners: dict[NGram, set[tuple[str, str]]] = {}

    def add(self, task: Task) -> None:
        for name, text in task_texts(task):
            for gram in ngrams(tokenize(text), self.n):
                self.owners.setdefault(gram, set()).add((task.id, name))

    def drop_common(self, max_common: int) -> int:
        """Forget n-grams found in more than `max_common` eval tasks; returns how many were dropped."""
        common = [gram for gram, owners in self.owners.items() if len({t for t, _ in owners}) > max_common]
        for gram in common:
            del self.owners[gram]
        return len(common)

    def matches(self, task: Task) -> list[Match]:
        found: dict[tuple[str, str, str], Match] = {}
        counted: set[tuple[str, NGram, str, str]] = set()  # each distinct shared n-gram counts once
        for name, text in task_texts(task):
            for gram in ngrams(tokenize(text), self.n):
                for eval_id, eval_field in self.owners.get(gram, ()):
                    if (name, gram, eval_id, eval_field) in counted:
                        continue
                    counted.add((name, gram, eval_id, eval_field))
                    match = found.setdefault((name, eval_id, eval_field), Match(name, eval_id, eval_field))
                    match.shared_ngrams += 1
                    match.example = match.example or " ".join(gram)
        return sorted(found.values(), key=lambda m: (FIELDS.index(m.field), m.eval_task, m.eval_field))


def decontaminate(
    train: Sequence[Task],
    eval_tasks: Sequence[Task],
    *,
    n: int = DEFAULT_N,
    max_common: int = DEFAULT_MAX_COMMON,
    progress: Callable[[str], None] | None = None,
) -> Report:
    index = EvalIndex(n)
    for task in eval_tasks:
        index.add(task)
    dropped = index.drop_common(max_common)
    if progress:
        progress(
            f"indexed {len(index.owners)} {n}-grams of {len(eval_tasks)} eval tasks ({dropped} boilerplate)"
        )
    flagged = []
    for count, task in enumerate(train, 1):
        matches = index.matches(task)
        if matches:
            flagged.append(Flagged(task.id, str(task.root), matches))
        if progress and (count % 50 == 0 or count == len(train)):
            progress(f"checked {count}/{len(train)} train tasks, {len(flagged)} flagged")
    return Report(n, len(train), len(eval_tasks), flagged, dropped)
