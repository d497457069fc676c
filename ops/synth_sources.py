"""Where synthesis gets real projects: sdists from PyPI (their tests ship in them), cached and unpacked once.

`pip download --no-binary :all: --no-deps NAME==VERSION` fetches the release's source archive into the
cache; it is unpacked with tarfile's `data` filter (no links out, no devices, no absolute paths) into its
own folder, which later runs reuse. Nothing of the project runs on this machine: its tests run in sandboxes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from ops.paths import Paths

_REQUIREMENT = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)")


class SourceError(RuntimeError):
    """A project that could not be fetched or unpacked; the message says what to do."""


def parse_requirement(text: str) -> tuple[str, str]:
    """NAME==VERSION, exactly pinned (a synthesized task records the release it came from)."""
    match = _REQUIREMENT.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not NAME==VERSION (pin the release, e.g. toolz==1.2.0)")
    return match["name"], match["version"]


def fetch_project(name: str, version: str, paths: Paths) -> Path:
    """The unpacked sdist of NAME==VERSION (fetched on first use); returns the folder holding its files."""
    root = paths.cache / "synth" / "projects" / f"{_normalize(name)}-{version}"
    if (root / ".complete").exists():
        return _single_child(root)
    downloads = paths.cache / "synth" / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = _find_archive(downloads, name, version) or _download(name, version, downloads)
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    _unpack(archive, partial)
    shutil.rmtree(root, ignore_errors=True)
    (partial / ".complete").write_text(archive.name + "\n")
    partial.rename(root)
    return _single_child(root)


def _download(name: str, version: str, downloads: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
        "--dest", str(downloads), f"{name}=={version}",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    archive = _find_archive(downloads, name, version)
    if done.returncode != 0 or archive is None:
        raise SourceError(
            f"pip could not download the sdist of {name}=={version}: {done.stderr.strip()[-500:]}\n"
            "check the name and version on PyPI (synthesis needs a source release: its tests ship in it)"
        )
    return archive


def _find_archive(downloads: Path, name: str, version: str) -> Path | None:
    stem = f"{_normalize(name)}-{version}".lower()
    for path in sorted(downloads.iterdir()):
        base = path.name.lower().replace("-", "_").replace(".", "_")
        if base.startswith(stem.replace("-", "_").replace(".", "_")) and path.name.endswith(
            (".tar.gz", ".tgz", ".zip", ".tar.bz2")
        ):
            return path
    return None


def _unpack(archive: Path, into: Path) -> None:
    try:
        if archive.name.endswith(".zip"):
            with zipfile.ZipFile(archive) as bundle:
                for member in bundle.namelist():
                    target = (into / member).resolve()
                    if not target.is_relative_to(into.resolve()):
                        raise SourceError(f"{archive.name}: member {member!r} would land outside its folder")
                bundle.extractall(into)
        else:
            with tarfile.open(archive) as bundle:
                bundle.extractall(into, filter="data")
    except (tarfile.TarError, zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"{archive}: cannot unpack ({exc}); delete it and run again") from exc


def _single_child(root: Path) -> Path:
    children = [path for path in root.iterdir() if path.is_dir()]
    return children[0] if len(children) == 1 else root


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()
