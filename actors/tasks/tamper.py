"""Tampering: any change, deletion or addition under a protected glob, comparing repo/ with a workspace.

The comparison is a pure function of two snapshots (path -> entry), so the verifier can snapshot the
workspace wherever it lives (a sandbox, a copied folder) and audits can recompute it from stored trees.
An entry is a regular file (its bytes), a symbolic link (its target, never followed) or something else
(a fifo, a socket, a device: always suspicious). Folders are not entries: what matters is what they hold,
and an empty folder cannot change how code runs. File modes are not compared either: copying a tree in
and out of a sandbox may change them without anyone tampering.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from actors.tasks.globs import GlobSet


class EntryKind(StrEnum):
    FILE = "file"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass(frozen=True)
class Entry:
    kind: EntryKind
    data: bytes = b""  # file bytes, or the link target

    @classmethod
    def file(cls, data: bytes | str) -> Entry:
        return cls(EntryKind.FILE, data.encode("utf-8") if isinstance(data, str) else data)


Snapshot = Mapping[str, Entry]


def find_tampering(
    protected: Sequence[str] | GlobSet, original: Snapshot, workspace: Snapshot
) -> tuple[str, ...]:
    """Protected paths that differ between `original` (repo/) and `workspace`, sorted.

    A path counts if it is protected on either side: adding a protected file, deleting one, changing its
    bytes, or turning it into a link or folder are all tampering.
    """
    globs = protected if isinstance(protected, GlobSet) else GlobSet.compile(protected)
    changed = (p for p in set(original) | set(workspace) if original.get(p) != workspace.get(p))
    return tuple(globs.select(changed))


def snapshot_tree(root: Path, *, only: GlobSet | None = None) -> dict[str, Entry]:
    """Read a folder into a snapshot without following any symbolic link.

    With `only`, files outside those globs are not read (a workspace may hold large unprotected files).
    Folders that are links are recorded as links and not entered.
    """
    snapshot: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for name in dirnames + filenames:
            relative = (here / name).relative_to(root).as_posix()
            if only is None or only.covers(relative):
                entry = _entry(here / name)
                if entry is not None:
                    snapshot[relative] = entry
    return snapshot


def _entry(path: Path) -> Entry | None:
    info = path.lstat()
    if stat.S_ISDIR(info.st_mode):
        return None
    if stat.S_ISLNK(info.st_mode):
        return Entry(EntryKind.SYMLINK, os.readlink(path).encode("utf-8", "surrogateescape"))
    if not stat.S_ISREG(info.st_mode):
        return Entry(EntryKind.OTHER)
    # O_NOFOLLOW and the fstat below: if the file was swapped for a link or a fifo since lstat, the swap is
    # seen instead of read through (O_NONBLOCK keeps a fifo from blocking the open).
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return Entry(EntryKind.OTHER)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return Entry(EntryKind.OTHER)
        return Entry(EntryKind.FILE, handle.read())


def compare_trees(protected: Sequence[str], repo_dir: Path, workspace_dir: Path) -> tuple[str, ...]:
    """`find_tampering` over two folders on disk, reading only the protected parts of each."""
    globs = GlobSet.compile(protected)
    if not globs.patterns:
        return ()
    return find_tampering(
        globs, snapshot_tree(repo_dir, only=globs), snapshot_tree(workspace_dir, only=globs)
    )
