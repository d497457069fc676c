from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from actors.tasks.workspace import CopyLimits, WorkspaceError, copy_workspace

from .helpers import write_tree


def _files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def test_copies_files_folders_and_modes(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"a.py": "a", "pkg/b.py": "b", "pkg/deep/c.txt": "c", ".hidden": "h"})
    os.chmod(src / "a.py", 0o700)
    report = copy_workspace(src, tmp_path / "dest")
    assert _files(tmp_path / "dest") == {"a.py": "a", "pkg/b.py": "b", "pkg/deep/c.txt": "c", ".hidden": "h"}
    assert stat.S_IMODE((tmp_path / "dest" / "a.py").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "dest" / "pkg" / "b.py").stat().st_mode) == 0o644
    assert (report.files, report.links, report.bytes, report.skipped) == (4, 0, 4, [])


def test_links_out_of_the_workspace_are_not_followed(tmp_path: Path) -> None:
    write_tree(tmp_path / "secret", {"key": "TOP SECRET"})
    src = write_tree(tmp_path / "src", {"a.py": "a", "sub/b.py": "b"})
    os.symlink(tmp_path / "secret" / "key", src / "absolute")
    os.symlink("../secret/key", src / "relative")
    os.symlink(tmp_path / "secret", src / "dir")
    os.symlink("../../secret", src / "sub" / "up")
    report = copy_workspace(src, tmp_path / "dest")
    dest = tmp_path / "dest"
    assert _files(dest) == {"a.py": "a", "sub/b.py": "b"}
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert sorted(path for path, _ in report.skipped) == ["absolute", "dir", "relative", "sub/up"]
    assert "TOP SECRET" not in "".join(_files(dest).values())


def test_links_inside_the_workspace_are_kept(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"a.py": "a", "sub/b.py": "b"})
    os.symlink("a.py", src / "alias.py")
    os.symlink("../a.py", src / "sub" / "up.py")
    os.symlink("sub", src / "subalias")
    report = copy_workspace(src, tmp_path / "dest")
    dest = tmp_path / "dest"
    assert os.readlink(dest / "alias.py") == "a.py" and (dest / "sub" / "up.py").read_text() == "a"
    assert (dest / "subalias" / "b.py").read_text() == "b"
    assert report.links == 3 and report.skipped == []


def test_escapes_through_other_links_are_caught(tmp_path: Path) -> None:
    # `sneaky` looks inside lexically (sub/up/.. -> sub), but sub/up is a link to '..', so it resolves
    # to the workspace's parent; `up` itself leaves too.
    src = write_tree(tmp_path / "src", {"sub/b.py": "b"})
    os.symlink("..", src / "sub" / "up")
    os.symlink("sub/up/..", src / "sneaky")
    report = copy_workspace(src, tmp_path / "dest")
    assert not (tmp_path / "dest" / "sneaky").is_symlink()
    assert {path for path, _ in report.skipped} == {"sneaky"}
    assert (tmp_path / "dest" / "sub" / "up").is_symlink()  # '..' from sub/ is the workspace itself


def test_special_files_and_compiled_python_are_dropped(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"m.py": "m", "__pycache__/m.cpython-311.pyc": "x", "old.pyc": "x"})
    os.mkfifo(src / "fifo")
    report = copy_workspace(src, tmp_path / "dest")
    assert _files(tmp_path / "dest") == {"m.py": "m"}
    assert sorted(path for path, _ in report.skipped) == ["__pycache__", "fifo", "old.pyc"]


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (CopyLimits(max_files=2), "more than 2 files"),
        (CopyLimits(max_bytes=10), "more than 10 bytes"),
        (CopyLimits(max_depth=1), "deeper than 1"),
    ],
)
def test_limits(tmp_path: Path, limits: CopyLimits, message: str) -> None:
    src = write_tree(tmp_path / "src", {"a": "12345678", "b/c/d": "12345678", "e": "x"})
    with pytest.raises(WorkspaceError, match=message):
        copy_workspace(src, tmp_path / "dest", limits)


def test_source_must_be_a_real_folder(tmp_path: Path) -> None:
    real = write_tree(tmp_path / "real", {"a": "a"})
    os.symlink(real, tmp_path / "link")
    with pytest.raises(WorkspaceError, match="not a folder"):
        copy_workspace(tmp_path / "link", tmp_path / "dest")
    with pytest.raises(FileExistsError):
        copy_workspace(real, real)
