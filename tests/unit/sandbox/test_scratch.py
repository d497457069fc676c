"""Scratch folders that name their owner, and the sweep of those whose owner is gone (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sandbox_agent.owner import Owner, current
from sandbox_agent.scratch import owned_temp_dir, owner_of, sweep

MAKE_AND_WAIT = (
    "import sys, time\n"
    "from sandbox_agent.scratch import owned_temp_dir\n"
    "folder = owned_temp_dir(prefix='trialog-verify-', dir=sys.argv[1])\n"
    "open(folder.name + '/task.py', 'w').write('x')\n"
    "print(folder.name, flush=True)\n"
    "time.sleep(600)\n"
)


def scratch_of_a_process(root: Path) -> tuple[subprocess.Popen[str], Path]:
    child = subprocess.Popen(
        [sys.executable, "-c", MAKE_AND_WAIT, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, Path(child.stdout.readline().strip())


def test_a_scratch_folder_names_its_owner_and_goes_with_its_block(tmp_path: Path) -> None:
    with owned_temp_dir(prefix="trialog-verify-", dir=tmp_path) as scratch:
        assert owner_of(Path(scratch).name) == current()
        assert Path(scratch).parent == tmp_path and Path(scratch).is_dir()
    assert not Path(scratch).exists()


def test_names_that_are_no_owned_scratch_are_not_owners() -> None:
    me = current()
    assert me is not None
    assert owner_of(f"trialog-verify-@{me.text()}@abc") == me
    for name in (
        "trialog-verify-abc",
        f"other-@{me.text()}@x",
        "trialog-@garbage@x",
        f"trialog-@{me.text()}",
    ):
        assert owner_of(name) is None, name


def test_the_scratch_of_a_killed_process_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    killed, dead_folder = scratch_of_a_process(tmp_path)
    live, live_folder = scratch_of_a_process(tmp_path)
    try:
        os.chmod(dead_folder, 0o500)  # a read-only folder (a task's modes) does not stop the sweep
        killed.kill()
        killed.wait()
        unowned = tmp_path / "trialog-verify-made-by-an-old-version"
        unowned.mkdir()
        with owned_temp_dir(prefix="trialog-verify-", dir=tmp_path) as mine:
            assert sweep(tmp_path) == 1
            assert not dead_folder.exists()
            assert live_folder.is_dir() and Path(mine).is_dir() and unowned.is_dir()
    finally:
        live.kill()
        live.wait()
    assert sweep(tmp_path) == 1 and not live_folder.exists()


def test_a_link_named_like_a_dead_owners_scratch_is_not_followed(tmp_path: Path) -> None:
    me = current()
    assert me is not None
    dead = Owner(me.host, me.boot, me.pidns, me.pid, me.start + 1)  # this pid, another start: gone
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    (tmp_path / f"trialog-verify-@{dead.text()}@link").symlink_to(target)
    (tmp_path / f"trialog-verify-@{dead.text()}@real").mkdir()
    assert sweep(tmp_path) == 1
    assert (target / "keep.txt").read_text() == "keep"
    assert (tmp_path / f"trialog-verify-@{dead.text()}@link").is_symlink()
