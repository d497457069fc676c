from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.tasks.patch import (
    NO_NEWLINE,
    FilePatch,
    PatchError,
    apply_patch,
    apply_to_tree,
    make_patch,
    parse_patch,
    reverse_patch,
)

from .helpers import git_apply, write_tree


def _apply(patch: str | tuple[FilePatch, ...], files: dict[str, str]) -> dict[str, str]:
    changes = apply_patch(patch, files.get)
    result = {**files, **{k: v for k, v in changes.items() if v is not None}}
    return {k: v for k, v in result.items() if changes.get(k, "") is not None}


_LINE = st.sampled_from(["a", "b", "c", "", "  x = 1", "\f", "tab\t", "ü"])
_TEXT = st.lists(_LINE, max_size=12).map(lambda lines: "\n".join(lines)) | st.lists(_LINE, max_size=12).map(
    lambda lines: "".join(line + "\n" for line in lines)
)


@given(before=_TEXT, after=_TEXT)
def test_make_then_apply_round_trips(before: str, after: str) -> None:
    old = {"m.py": before} if before else {}
    new = {"m.py": after} if after else {}
    patch = make_patch(old, new)
    if old == new:
        assert patch == ""
    else:
        assert _apply(patch, old) == new


@given(before=_TEXT, after=_TEXT)
def test_a_reversed_patch_undoes_it(before: str, after: str) -> None:
    old = {"m.py": before} if before else {}
    new = {"m.py": after} if after else {}
    patch = make_patch(old, new)
    if old != new:  # else there is nothing to undo (and no patch)
        assert _apply(patch, old) == new
        assert _apply(reverse_patch(patch), new) == old


@settings(max_examples=25, deadline=None)
@given(before=_TEXT.filter(bool), after=_TEXT.filter(bool))
def test_git_apply_agrees(tmp_path_factory: pytest.TempPathFactory, before: str, after: str) -> None:
    root = tmp_path_factory.mktemp("git")
    tree = write_tree(root / "tree", {"m.py": before, "keep.txt": "k\n"})
    patch = make_patch({"m.py": before}, {"m.py": after})
    if not patch:
        return
    (root / "p.diff").write_text(patch, encoding="utf-8")
    result = git_apply(root / "p.diff", tree)
    assert result.returncode == 0, result.stderr
    assert (tree / "m.py").read_text(encoding="utf-8") == after


def test_created_and_deleted_files(tmp_path: Path) -> None:
    before = {"gone.py": "x = 1\n", "same.py": "s\n"}
    after = {"new/mod.py": "y = 2\nz = 3", "same.py": "s\n"}
    patch = make_patch(before, after)
    assert "new file mode" in patch and "deleted file mode" in patch and NO_NEWLINE in patch
    assert apply_patch(patch, before.get) == {"gone.py": None, "new/mod.py": "y = 2\nz = 3"}
    tree = write_tree(tmp_path / "t", before)
    (tmp_path / "p.diff").write_text(patch)
    assert git_apply(tmp_path / "p.diff", tree).returncode == 0
    assert not (tree / "gone.py").exists()
    assert (tree / "new/mod.py").read_text() == "y = 2\nz = 3"
    tree2 = write_tree(tmp_path / "t2", before)
    apply_to_tree(tree2, patch)
    assert sorted(p.relative_to(tree2).as_posix() for p in tree2.rglob("*") if p.is_file()) == [
        "new/mod.py",
        "same.py",
    ]


def test_plain_diff_with_timestamps_and_commentary() -> None:
    patch = (
        "Fix the sign.\n"
        "--- a/calc.py\t2024-01-01 00:00:00\n"
        "+++ b/calc.py\t2024-01-01 00:00:00\n"
        "@@ -1,2 +1,2 @@\n"
        " def add(a, b):\n"
        "-    return a - b\n"
        "+    return a + b\n"
    )
    assert apply_patch(patch, {"calc.py": "def add(a, b):\n    return a - b\n"}.get) == {
        "calc.py": "def add(a, b):\n    return a + b\n"
    }


def test_insertion_only_hunk() -> None:
    patch = "--- a/f\n+++ b/f\n@@ -1,0 +2 @@\n+two\n"
    assert apply_patch(patch, {"f": "one\nthree\n"}.get) == {"f": "one\ntwo\nthree\n"}


_GOOD = "--- a/f.py\n+++ b/f.py\n@@ -1 +1 @@\n-old\n+new\n"


@pytest.mark.parametrize(
    ("patch", "files", "problem"),
    [
        ("just words\n", {}, "no file sections"),
        (_GOOD, {"f.py": "other\n"}, "does not match"),
        (_GOOD, {}, "does not exist"),
        (
            _GOOD.replace("a/f.py", "/dev/null").replace("-old\n", "").replace("-1 ", "-0,0 "),
            {"f.py": "x\n"},
            "exists",
        ),
        (_GOOD.replace("f.py", "../evil.py"), {}, "unsafe path"),
        (_GOOD.replace("f.py", ".git/config"), {}, "inside .git"),
        (_GOOD.replace("a/f.py", "f.py").replace("b/f.py", "f.py"), {}, "no a/ or b/ prefix"),
        (_GOOD.replace("+++ b/f.py", "+++ b/g.py"), {}, "renames are unsupported"),
        ("diff --git a/x b/y\nrename from x\nrename to y\n", {}, "unsupported"),
        ("diff --git a/x b/x\nGIT binary patch\n", {}, "unsupported"),
        (_GOOD.replace("@@ -1 +1 @@", "@@ -1,2 +1 @@"), {"f.py": "old\n"}, "ends early"),
        (_GOOD.replace("+new\n", "+new\n+more\n"), {"f.py": "old\n"}, "more lines than its header"),
        (_GOOD.replace("@@ -1 +1 @@", "@@ oops @@"), {"f.py": "old\n"}, "malformed hunk header"),
        (_GOOD.replace("-old", "*old"), {"f.py": "old\n"}, "starts with '*'"),
        (_GOOD + _GOOD, {"f.py": "old\n"}, "patched twice"),
        ("--- a/f.py\n+++ b/f.py\n", {"f.py": "x\n"}, "no hunks"),
    ],
)
def test_bad_patches_are_rejected(patch: str, files: dict[str, str], problem: str) -> None:
    with pytest.raises(PatchError) as raised:
        apply_patch(patch, files.get)
    assert problem in str(raised.value)


def test_errors_name_the_line() -> None:
    with pytest.raises(PatchError) as raised:
        parse_patch("comment\n" + _GOOD.replace("-old", "*old"))
    assert raised.value.line == 5


def test_deleting_requires_the_whole_file() -> None:
    patch = "--- a/f\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n"
    with pytest.raises(PatchError, match="unaccounted"):
        apply_patch(patch, {"f": "one\ntwo\n"}.get)
    assert apply_patch(patch, {"f": "one\n"}.get) == {"f": None}


def test_make_patch_refuses_what_it_cannot_express() -> None:
    with pytest.raises(PatchError, match="empty files"):
        make_patch({}, {"empty.py": ""})
    with pytest.raises(PatchError, match="unsupported path"):
        make_patch({}, {"my file.py": "x\n"})


def test_symlinks_are_not_patched_through(tmp_path: Path) -> None:
    write_tree(tmp_path / "outside", {"f.py": "old\n"})
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "f.py").symlink_to(tmp_path / "outside" / "f.py")
    with pytest.raises(PatchError, match="symbolic link"):
        apply_to_tree(tmp_path / "tree", _GOOD)
    assert (tmp_path / "outside" / "f.py").read_text() == "old\n"
