"""Issue 14, attack 1: a task folder whose links or patch would make validation write outside the copy.

Each variant is built on real folders, loaded with `load_task` (as `tasks validate`'s survey does before any
sandbox starts) and, where the static check is bypassed, applied with `apply_to_tree` (what `copy_repo`
does on the host). The outside target must not exist afterwards.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from actors.tasks.patch import PatchError, apply_to_tree, parse_patch, read_tree_file
from actors.tasks.spec import TaskError, load_task
from ops.paths import REPO_ROOT

SOURCE = REPO_ROOT / "examples" / "tasks" / "easy-fix-range"


def _new_file(path: str, text: str = "pwned\n") -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1 @@\n+{text}"
    )


def _task(tmp_path: Path, links: dict[str, str], extra_patch: str = "") -> tuple[Path, Path]:
    """The example task with `links` (path in repo/ -> target) and `extra_patch` appended to the solution;
    returns the task folder and the outside folder an escape would reach."""
    outside = tmp_path / "outside"
    task = tmp_path / "deep" / "er" / "task"
    shutil.copytree(SOURCE, task)
    for name, target in links.items():
        (task / "repo" / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, task / "repo" / name)
    if extra_patch:
        patch = task / "solution.patch"
        patch.write_text(patch.read_text() + extra_patch)
    return task, outside


# `q -> .` makes q/q/... the repo itself, so the kernel climbs out where the text climbs back in.
CHAIN = "q/q/q/q/../../../../outside"


@pytest.mark.parametrize(
    ("links", "patched"),
    [
        pytest.param({"q": ".", "p": CHAIN}, "p/evil.txt", id="chain-through-self-link"),
        pytest.param({"p": "/tmp"}, "p/evil.txt", id="absolute"),
        pytest.param({"p": ".."}, "p/evil.txt", id="dot-dot"),
        pytest.param({"p": "../../../../outside"}, "p/evil.txt", id="relative-out"),
        pytest.param({"sub/q": "..", "p": "sub/q/../../outside"}, "p/evil.txt", id="chain-through-subfolder"),
        # `new/` does not exist yet (the patch creates it): realpath still resolves what the kernel will.
        pytest.param({"q": ".", "p": "new/../q/q/../../../outside"}, "new/x.txt", id="later-created-folder"),
    ],
)
def test_links_that_resolve_outside_repo_are_invalid(
    tmp_path: Path, links: dict[str, str], patched: str
) -> None:
    task, outside = _task(tmp_path, links, _new_file(patched))
    with pytest.raises(TaskError) as caught:
        load_task(task)
    assert caught.value.path == task / "repo" / "p"
    assert "leaves repo/" in caught.value.problem
    assert not outside.exists() and not (tmp_path / "deep" / "outside").exists()


def test_a_patch_through_a_link_inside_repo_is_invalid(tmp_path: Path) -> None:
    task, _ = _task(tmp_path, {"alias": "."}, _new_file("alias/evil.txt"))
    with pytest.raises(TaskError) as caught:
        load_task(task)
    assert "alias/evil.txt lies under a symbolic link" in caught.value.problem


def test_a_patch_through_a_dangling_link_to_a_later_created_folder_is_invalid(tmp_path: Path) -> None:
    task, _ = _task(tmp_path, {"lib": "pkg"}, _new_file("pkg/new.py") + _new_file("lib/evil.py"))
    with pytest.raises(TaskError, match=r"lib/evil\.py lies under a symbolic link"):
        load_task(task)


def test_a_link_in_tests_that_resolves_outside_is_invalid(tmp_path: Path) -> None:
    task, _ = _task(tmp_path, {})
    os.symlink(".", task / "tests" / "q")
    os.symlink("q/q/../../repo/counting.py", task / "tests" / "peek.py")
    with pytest.raises(TaskError) as caught:
        load_task(task)
    assert caught.value.path == task / "tests" / "peek.py" and "leaves tests/" in caught.value.problem


def test_a_link_that_stays_inside_is_still_allowed(tmp_path: Path) -> None:
    task, _ = _task(tmp_path, {"sub/me": "../sub", "d": "sub/me", "same.py": "d/me/../fizzbuzz.py"})
    assert load_task(task).id == "easy-fix-range"


# ---- the applier alone: the last line of defence, even if a static check is bypassed -----------------


@pytest.mark.parametrize("target", ["../outside", "/nonexistent-trialog-escape", "."])
def test_the_applier_never_writes_through_a_link(tmp_path: Path, target: str) -> None:
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    os.symlink(target, tree / "p")
    for patched in ("p/evil.txt", "p/deeper/evil.txt"):
        with pytest.raises(PatchError, match="symbolic link"):
            apply_to_tree(tree, _new_file(patched))
    assert list(outside.iterdir()) == [] and not os.path.lexists("/nonexistent-trialog-escape")
    assert sorted(os.listdir(tree)) == ["p"]


def test_the_applier_never_writes_or_reads_a_file_that_is_a_link(tmp_path: Path) -> None:
    tree, secret = tmp_path / "tree", tmp_path / "secret.txt"
    tree.mkdir()
    secret.write_text("old\n")
    os.symlink(secret, tree / "f.txt")
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-old\n+new\n"
    with pytest.raises(PatchError, match="symbolic link"):
        apply_to_tree(tree, patch)
    with pytest.raises(PatchError, match="symbolic link"):
        read_tree_file(tree)("f.txt")
    assert secret.read_text() == "old\n"


def test_the_applier_still_creates_folders_and_files(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "old.txt").write_text("x\n")
    patch = _new_file("a/b/c/new.txt", "hello\n") + "--- a/a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
    changes = apply_to_tree(tree, parse_patch(patch))
    assert changes == {"a/b/c/new.txt": "hello\n", "a/old.txt": None}
    assert (tree / "a" / "b" / "c" / "new.txt").read_text() == "hello\n"
    assert not (tree / "a" / "old.txt").exists()
