from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.tasks.tamper import Entry, EntryKind, compare_trees, find_tampering, snapshot_tree

from .helpers import write_tree

PROTECTED = ["tests/**", "conftest.py", "setup.cfg"]
ORIGINAL = {
    "calc.py": Entry.file("x"),
    "tests/test_a.py": Entry.file("a"),
    "tests/data/in.txt": Entry.file("d"),
    "setup.cfg": Entry.file("[x]"),
}


@pytest.mark.parametrize(
    ("change", "tampered"),
    [
        ({}, ()),
        ({"calc.py": Entry.file("changed")}, ()),  # unprotected code is the agent's to change
        ({"new_module.py": Entry.file("new")}, ()),
        ({"tests/test_a.py": Entry.file("assert True")}, ("tests/test_a.py",)),
        ({"tests/test_a.py": None}, ("tests/test_a.py",)),  # deletion
        ({"tests/test_b.py": Entry.file("b")}, ("tests/test_b.py",)),  # addition
        ({"conftest.py": Entry.file("import pytest")}, ("conftest.py",)),  # addition of a protected name
        ({"tests/data/in.txt": Entry(EntryKind.SYMLINK, b"/etc/passwd")}, ("tests/data/in.txt",)),
        ({"setup.cfg": Entry(EntryKind.OTHER)}, ("setup.cfg",)),
        ({"tests/test_a.py": None, "setup.cfg": None, "calc.py": None}, ("setup.cfg", "tests/test_a.py")),
    ],
)
def test_find_tampering(change: dict[str, Entry | None], tampered: tuple[str, ...]) -> None:
    workspace = dict(ORIGINAL)
    for path, entry in change.items():
        if entry is None:
            del workspace[path]
        else:
            workspace[path] = entry
    assert find_tampering(PROTECTED, ORIGINAL, workspace) == tampered


def test_no_protected_globs_means_no_tampering() -> None:
    assert find_tampering([], ORIGINAL, {}) == ()


def test_snapshot_never_follows_links(tmp_path: Path) -> None:
    write_tree(tmp_path / "outside", {"secret": "s3cret"})
    tree = write_tree(tmp_path / "ws", {"a.py": "a", "sub/b.py": "b"})
    os.symlink(tmp_path / "outside" / "secret", tree / "link")
    os.symlink(tmp_path / "outside", tree / "dirlink")
    os.mkfifo(tree / "fifo")
    snapshot = snapshot_tree(tree)
    assert snapshot == {
        "a.py": Entry.file("a"),
        "sub/b.py": Entry.file("b"),
        "link": Entry(EntryKind.SYMLINK, str(tmp_path / "outside" / "secret").encode()),
        "dirlink": Entry(EntryKind.SYMLINK, str(tmp_path / "outside").encode()),
        "fifo": Entry(EntryKind.OTHER),
    }


def test_compare_trees_on_disk(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "repo", {"calc.py": "x", "tests/test_a.py": "a"})
    workspace = write_tree(
        tmp_path / "ws", {"calc.py": "fixed", "tests/test_a.py": "a", "big.bin": "z" * 1000}
    )
    assert compare_trees(["tests/**"], repo, workspace) == ()
    (workspace / "tests" / "test_a.py").unlink()
    os.symlink("../calc.py", workspace / "tests" / "test_a.py")
    (workspace / "tests" / "conftest.py").write_text("# sneaky")
    assert compare_trees(["tests/**"], repo, workspace) == ("tests/conftest.py", "tests/test_a.py")
    assert compare_trees([], repo, workspace) == ()


def test_replacing_a_protected_folder_with_a_link(tmp_path: Path) -> None:
    repo = write_tree(tmp_path / "repo", {"tests/test_a.py": "a"})
    elsewhere = write_tree(tmp_path / "elsewhere", {"test_a.py": "a"})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.symlink(elsewhere, workspace / "tests")
    assert compare_trees(["tests"], repo, workspace) == ("tests", "tests/test_a.py")
