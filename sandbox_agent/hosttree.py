"""Host folders as manifests and back: never following a symbolic link, never leaving the folder.

Used to copy a task's repository into a sandbox (`trialog sandbox run --workspace DIR`), by the local
process backend, and to restore a snapshot on the host (the verifier, `audit --recheck`, `reproduce`). A
link is recorded as a link, whatever it points at: it is never followed, so a link to /etc/passwd in a task
folder copies a link, not the host's password file. Sockets, pipes and devices are skipped.

Writing a manifest's tree (`write_tree`) treats the manifest as the policy's: it may be crafted. Refused,
before anything is written: names that are not the one canonical spelling of their bytes on disk (two
strings that differ, such as 'é' and its surrogate-escaped UTF-8 bytes, would alias one file, one of them a
link), '..', '.', empty components and NUL (see `sandbox_agent.manifest`). While writing, every folder is
entered through a file descriptor opened with O_NOFOLLOW | O_DIRECTORY, and every file is created with
O_CREAT | O_EXCL | O_NOFOLLOW relative to it, so even an alias the checks missed, or a link planted in the
folder while we write, makes the write fail (`UnsafeTree`) instead of landing outside `root`. Modes are set
through descriptors (fchmod), never by path.

Still possible, by design: links written into the tree may point anywhere (they are data, never followed
here; whoever later reads the tree must not follow them either, as `actors.tasks.workspace` does not).
`root` itself is trusted: it is opened following links, as the caller chose it. `read_tree` lists folders
by path, so a folder swapped for a link while it is being read can still be listed; only file reads refuse
to follow.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from sandbox_agent.manifest import Entry, Kind, Manifest, ManifestError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeTree(ManifestError):
    """Writing the tree would go through a link, a file or an existing name: refused, nothing outside
    the folder was touched."""


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


def open_folder(root_fd: int, parts: Sequence[bytes], *, create: bool, where: str) -> int:
    """A new descriptor for the folder `parts` below `root_fd`, entered one real folder at a time.

    Each component is opened with O_NOFOLLOW | O_DIRECTORY relative to the previous one, so a link (or a
    file) anywhere on the way is an `UnsafeTree` error naming `where`, never followed. With `create`,
    missing folders are made (mode 0o700). Without it, a missing folder raises FileNotFoundError.
    """
    fd = os.dup(root_fd)
    try:
        for part in parts:
            if part in (b"", b".", b"..") or b"\0" in part:
                raise UnsafeTree(f"{where!r}: a folder named {os.fsdecode(part)!r} is not allowed")
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeTree(
                        f"{where!r}: {os.fsdecode(part)!r} on the way is a link or a file, not a folder"
                    ) from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def split_path(path: str) -> tuple[list[bytes], bytes]:
    """The folders and the name of a relative path, as the bytes the file system sees."""
    *folders, name = os.fsencode(path).split(b"/")
    return folders, name


def write_tree(root: Path, manifest: Manifest, content: Callable[[Entry], bytes]) -> None:
    """Make `root` hold exactly the manifest's tree (what was there before is removed).

    Raises `UnsafeTree` (a `ManifestError`) when an entry would be written through a link or over an
    entry already written; the folder is then partly written, but nothing outside it is.
    """
    clear_folder(root)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for entry in manifest.entries:
            _write_entry(root_fd, entry, content)
        # Folder modes last and deepest first: a read-only folder must still receive its contents.
        for entry in reversed(manifest.entries):
            if entry.kind is Kind.DIR:
                fd = open_folder(root_fd, os.fsencode(entry.path).split(b"/"), create=False, where=entry.path)
                try:
                    os.fchmod(fd, entry.mode)
                finally:
                    os.close(fd)
    finally:
        os.close(root_fd)


def _write_entry(root_fd: int, entry: Entry, content: Callable[[Entry], bytes]) -> None:
    folders, name = split_path(entry.path)
    # Parents the manifest does not list are made as private folders (never followed if they exist).
    parent = open_folder(root_fd, folders, create=True, where=entry.path)
    try:
        if entry.kind is Kind.DIR:
            os.mkdir(name, 0o700, dir_fd=parent)
        elif entry.kind is Kind.LINK:
            os.symlink(os.fsencode(entry.target), name, dir_fd=parent)
        else:
            fd = os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=parent)
            with os.fdopen(fd, "wb") as handle:
                handle.write(content(entry))
                os.fchmod(handle.fileno(), entry.mode)
    except FileExistsError:
        raise UnsafeTree(f"{entry.path!r} is already in the tree (two names for one path)") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeTree(f"{entry.path!r} would be written through a link or a file") from None
        raise
    finally:
        os.close(parent)


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
