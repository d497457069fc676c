"""The size of a change (`actors.tasks.change`): files and lines, links and caches, on disk and pure."""

from __future__ import annotations

import os
from pathlib import Path

from actors.tasks.change import ChangeSize, change_size, diff_trees
from actors.tasks.tamper import Entry, EntryKind


def test_added_removed_and_edited_lines_are_counted_per_file() -> None:
    before = {"a.py": Entry.file("x\ny\nz\n"), "gone.py": Entry.file("1\n2\n"), "same.py": Entry.file("s\n")}
    after = {"a.py": Entry.file("x\nY\nz\nw\n"), "new.py": Entry.file("n\n"), "same.py": Entry.file("s\n")}
    assert diff_trees(before, after) == ChangeSize(files=3, lines_added=3, lines_removed=3)
    assert diff_trees(before, before) == ChangeSize(0, 0, 0)


def test_a_line_moved_within_a_file_is_no_change_of_lines() -> None:
    moved = diff_trees({"a.py": Entry.file("1\n2\n")}, {"a.py": Entry.file("2\n1\n")})
    assert moved == ChangeSize(files=1, lines_added=0, lines_removed=0)


def test_a_link_counts_as_one_line_and_is_not_followed() -> None:
    link = Entry(EntryKind.SYMLINK, b"/etc/passwd")
    assert diff_trees({}, {"l": link}) == ChangeSize(1, 1, 0)


def test_on_disk_caches_and_compiled_python_are_left_out(tmp_path: Path) -> None:
    repo, workspace = tmp_path / "repo", tmp_path / "ws"
    for root in (repo, workspace):
        (root / "pkg").mkdir(parents=True)
        (root / "pkg" / "m.py").write_text("a = 1\n")
    (workspace / "pkg" / "m.py").write_text("a = 2\n")
    (workspace / "pkg" / "__pycache__").mkdir()
    (workspace / "pkg" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00" * 100)
    (workspace / "stray.pyc").write_bytes(b"\x00")
    os.symlink("/nowhere", workspace / "pkg" / "l")
    assert change_size(repo, workspace) == ChangeSize(files=2, lines_added=2, lines_removed=1)
