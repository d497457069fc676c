from __future__ import annotations

from pathlib import Path

from ops.stack.java import host_paths_of_runtime, java_home


def test_the_machine_has_java_17_or_newer() -> None:
    assert (java_home() / "bin" / "java").exists()


def test_runtime_mounts_include_the_etc_folders_its_links_point_into() -> None:
    home = java_home()
    mounts = host_paths_of_runtime(home)
    assert mounts[0] == home
    for mount in mounts[1:]:
        assert mount.is_relative_to(Path("/etc"))
    # Mounted folders never nest: one mount per tree.
    assert len({str(m) for m in mounts}) == len(mounts)
