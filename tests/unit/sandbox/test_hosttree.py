from __future__ import annotations

import os
from pathlib import Path

from sandbox_agent.hosttree import read_tree, write_tree
from sandbox_agent.manifest import Kind


def make_task(root: Path) -> Path:
    secret = root / "secret.txt"
    secret.write_text("host secret")
    task = root / "task"
    (task / "pkg" / "sub").mkdir(parents=True)
    (task / "pkg" / "mod.py").write_text("X = 1\n")
    (task / "run.sh").write_text("#!/bin/sh\n")
    (task / "run.sh").chmod(0o755)
    (task / "empty").mkdir()
    (task / "out").symlink_to(secret)
    (task / "up").symlink_to(root)
    (task / "in").symlink_to("pkg/mod.py")
    os.mkfifo(task / "fifo")
    return task


def test_links_are_recorded_as_links_and_never_followed(tmp_path: Path) -> None:
    manifest, contents = read_tree(make_task(tmp_path))
    by_path = {entry.path: entry for entry in manifest.entries}
    assert by_path["out"].kind is Kind.LINK and by_path["out"].target == str(tmp_path / "secret.txt")
    assert by_path["up"].kind is Kind.LINK
    assert b"host secret" not in contents.values()
    assert not any(path.startswith("up/") for path in by_path)
    assert "fifo" not in by_path  # pipes, sockets and devices are skipped
    assert by_path["run.sh"].mode == 0o755 and by_path["empty"].kind is Kind.DIR


def test_a_tree_written_back_reads_the_same(tmp_path: Path) -> None:
    manifest, contents = read_tree(make_task(tmp_path))
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "stale").write_text("removed by the write")
    write_tree(copy, manifest, lambda entry: contents[entry.sha256])
    assert read_tree(copy) == (manifest, contents)


def test_read_only_folders_are_written_and_cleared(tmp_path: Path) -> None:
    source = tmp_path / "source"
    (source / "ro").mkdir(parents=True)
    (source / "ro" / "f").write_text("x")
    (source / "ro").chmod(0o555)
    manifest, contents = read_tree(source)
    target = tmp_path / "target"
    target.mkdir()
    write_tree(target, manifest, lambda entry: contents[entry.sha256])
    write_tree(target, manifest, lambda entry: contents[entry.sha256])  # over a read-only folder
    assert read_tree(target)[0] == manifest
    (source / "ro").chmod(0o755)
