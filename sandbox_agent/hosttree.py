"""Host folders as manifests and back: never following a symbolic link, never leaving the folder.

Used to copy a task's repository into a sandbox (`trialog sandbox run --workspace DIR`) and by the local
process backend. A link is recorded as a link, whatever it points at: it is never followed, so a link to
/etc/passwd in a task folder copies a link, not the host's password file. Sockets, pipes and devices are
skipped.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from sandbox_agent.manifest import Entry, Kind, Manifest


def read_tree(root: Path) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest of `root`'s contents and every file's bytes by sha256."""
    entries: list[Entry] = []
    contents: dict[str, bytes] = {}
    _walk(root, "", entries, contents)
    return Manifest.of(entries), contents


def _walk(folder: Path, prefix: str, entries: list[Entry], contents: dict[str, bytes]) -> None:
    with os.scandir(folder) as listing:
        children = sorted(listing, key=lambda child: child.name)
    for child in children:
        relative = prefix + os.fsdecode(child.name)
        info = child.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            entries.append(Entry.link(relative, os.fsdecode(os.readlink(child.path))))
        elif stat.S_ISDIR(info.st_mode):
            entries.append(Entry.directory(relative, info.st_mode))
            _walk(Path(child.path), relative + "/", entries, contents)
        elif stat.S_ISREG(info.st_mode):
            body = _read_no_follow(child.path)
            sha256 = hashlib.sha256(body).hexdigest()
            contents[sha256] = body
            entries.append(Entry.file(relative, info.st_mode, sha256, len(body)))


def _read_no_follow(path: str) -> bytes:
    # O_NOFOLLOW: if the file was swapped for a link since it was listed, refuse rather than follow it.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def write_tree(root: Path, manifest: Manifest, content: Callable[[Entry], bytes]) -> None:
    """Make `root` hold exactly the manifest's tree (what was there before is removed)."""
    clear_folder(root)
    for entry in manifest.entries:
        path = root / entry.path
        if entry.kind is Kind.DIR:
            path.mkdir(mode=0o700)
        elif entry.kind is Kind.LINK:
            os.symlink(entry.target, path)
        else:
            path.write_bytes(content(entry))
            os.chmod(path, entry.mode)
    # Folder modes last and deepest first: a read-only folder must still receive its contents.
    for entry in reversed(manifest.entries):
        if entry.kind is Kind.DIR:
            os.chmod(root / entry.path, entry.mode)


def clear_folder(root: Path) -> None:
    for child in list(root.iterdir()):
        if child.is_dir() and not child.is_symlink():
            _make_writable(child)
            shutil.rmtree(child)
        else:
            child.unlink()


def _make_writable(folder: Path) -> None:
    os.chmod(folder, 0o700)
    for current, folders, _files in os.walk(folder):
        for name in folders:
            path = os.path.join(current, name)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
