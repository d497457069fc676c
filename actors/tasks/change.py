"""The size of an agent's change: its final workspace against the task's original repo/, on the host.

A resource signal of a grade (`actors.tasks.reward_config`): how many files differ, how many lines were
added and removed. Lines are compared as multisets per file (a line moved within a file counts as
neither), which is linear in the files' sizes where a real diff is quadratic at worst: a policy must not be
able to make grading slow by writing a pathological file. Compiled Python and caches are left out, as the
grader's own copy leaves them out (`actors.tasks.workspace`). Nothing is followed through a link.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from actors.tasks.tamper import Entry, EntryKind, snapshot_tree

IGNORED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
DIFF_FILE_BYTES = 64 * 1024  # a bigger file is named in a diff, not compared (difflib can be quadratic)
DIFF_CHARS = 8 * 1024  # the most of a diff kept (for a judge's prompt)


@dataclass(frozen=True, slots=True)
class ChangeSize:
    files: int  # files (and links) added, removed or changed
    lines_added: int
    lines_removed: int

    @property
    def lines(self) -> int:
        return self.lines_added + self.lines_removed


def change_size(repo_dir: Path, workspace: Path) -> ChangeSize:
    return diff_trees(*read_trees(repo_dir, workspace))


def read_trees(repo_dir: Path, workspace: Path) -> tuple[dict[str, Entry], dict[str, Entry]]:
    """The task's repo/ and the workspace as trees (path -> entry), caches and compiled Python left out."""
    return _tree(repo_dir), _tree(workspace)


def changed_paths(before: dict[str, Entry], after: dict[str, Entry]) -> list[str]:
    """The paths added, removed or changed, in order."""
    return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))


def diff_trees(before: dict[str, Entry], after: dict[str, Entry]) -> ChangeSize:
    """Pure: the change from one tree (path -> entry) to another."""
    files = added = removed = 0
    for path in changed_paths(before, after):
        old, new = before.get(path), after.get(path)
        files += 1
        old_lines = _lines(old)
        new_lines = _lines(new)
        added += sum((new_lines - old_lines).values())
        removed += sum((old_lines - new_lines).values())
    return ChangeSize(files, added, removed)


def _tree(root: Path) -> dict[str, Entry]:
    return {
        path: entry
        for path, entry in snapshot_tree(root).items()
        if not IGNORED_PARTS.intersection(path.split("/")) and not path.endswith((".pyc", ".pyo"))
    }


def _lines(entry: Entry | None) -> Counter[bytes]:
    """A file's lines; a link or anything else counts as one line (its target or kind)."""
    if entry is None:
        return Counter()
    if entry.kind is EntryKind.FILE:
        return Counter(entry.data.splitlines())
    return Counter([entry.kind.value.encode() + b":" + entry.data])


def change_text(before: dict[str, Entry], after: dict[str, Entry], limit: int = DIFF_CHARS) -> str:
    """A unified diff of the change, at most `limit` characters (cut with a marker): what a reader, or a
    model judge, is shown. Files that are not UTF-8 text or are over `DIFF_FILE_BYTES` are only named."""
    parts: list[str] = []
    size = 0
    for path in changed_paths(before, after):
        old, new = _text(before.get(path)), _text(after.get(path))
        if old is None or new is None:
            piece = f"--- a/{path}\n+++ b/{path}\n(binary, a link or too large: not shown)\n"
        else:
            lines = difflib.unified_diff(old, new, f"a/{path}", f"b/{path}", lineterm="")
            piece = "\n".join(lines) + "\n"
        parts.append(piece)
        size += len(piece)
        if size >= limit:
            break
    text = "".join(parts)
    return text if len(text) <= limit else text[:limit] + "\n[... diff cut ...]\n"


def _text(entry: Entry | None) -> list[str] | None:
    if entry is None:
        return []
    if entry.kind is not EntryKind.FILE or len(entry.data) > DIFF_FILE_BYTES:
        return None
    try:
        return entry.data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None
