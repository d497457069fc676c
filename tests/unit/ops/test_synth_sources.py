"""Synthesis's project sources: pinned requirements, and an sdist unpacked once from the cache."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from ops.paths import Paths
from ops.synth_sources import SourceError, fetch_project, parse_requirement


def test_a_requirement_must_pin_its_release() -> None:
    assert parse_requirement("more-itertools==11.2.1") == ("more-itertools", "11.2.1")
    for text in ("toolz", "toolz>=1", "toolz==", "==1.0"):
        with pytest.raises(ValueError, match="NAME==VERSION"):
            parse_requirement(text)


def sdist(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_a_cached_sdist_is_unpacked_once_without_pip(tmp_path: Path) -> None:
    paths = Paths(home=tmp_path / "home", cache=tmp_path / "cache")
    downloads = paths.cache / "synth" / "sdists"
    downloads.mkdir(parents=True)
    sdist(downloads / "mini_lib-1.0.tar.gz", {"mini_lib-1.0/mini/core.py": b"X = 1\n"})
    root = fetch_project("mini-lib", "1.0", paths)
    assert (root / "mini" / "core.py").read_text() == "X = 1\n"
    (downloads / "mini_lib-1.0.tar.gz").unlink()  # the unpacked folder is reused from now on
    assert fetch_project("mini-lib", "1.0", paths) == root


def test_an_sdist_with_a_member_outside_its_folder_is_refused(tmp_path: Path) -> None:
    paths = Paths(home=tmp_path / "home", cache=tmp_path / "cache")
    downloads = paths.cache / "synth" / "sdists"
    downloads.mkdir(parents=True)
    sdist(downloads / "evil-1.0.tar.gz", {"../../escape.py": b"x"})
    with pytest.raises(SourceError, match="cannot unpack"):
        fetch_project("evil", "1.0", paths)
    assert not (tmp_path / "escape.py").exists()
