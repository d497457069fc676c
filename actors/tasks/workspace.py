"""Copying an agent's workspace for grading without ever reading outside it.

The workspace is untrusted: any entry may be a symbolic link to a secret on the grading machine, and
entries may be swapped while we copy. So the copy walks folders through file descriptors opened with
O_NOFOLLOW (a folder or file swapped for a link fails to open instead of being followed), copies only
regular files, folders and links whose target stays inside the copy, and enforces size limits.

Compiled Python (`__pycache__/`, `*.pyc`, `*.pyo`) is dropped: a `.pyc` written with an unchecked hash is
imported instead of its source, so the code that runs could differ from the code anyone reads.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK  # O_NONBLOCK: a fifo must not hang the open
_CHUNK = 1 << 20


class WorkspaceError(Exception):
    """The workspace cannot be copied (not a folder, or over a limit)."""


@dataclass(frozen=True)
class CopyLimits:
    max_files: int = 50_000  # files and links
    max_bytes: int = 1 << 30
    max_depth: int = 64


@dataclass
class CopyReport:
    files: int = 0
    links: int = 0
    bytes: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, why)


def copy_workspace(src: Path, dest: Path, limits: CopyLimits | None = None) -> CopyReport:
    """Copy the folder `src` to `dest` (which must not exist yet) as described above."""
    limits = limits or CopyLimits()
    try:
        root_fd = os.open(src, _DIR_FLAGS)
    except OSError as exc:
        raise WorkspaceError(f"{src}: not a folder (or a link to one): {exc.strerror}") from None
    dest.mkdir(mode=0o755)
    copier = _Copier(dest, limits)
    try:
        copier.copy_dir(root_fd, "", depth=0)
    finally:
        os.close(root_fd)
    copier.drop_escaping_links()
    return copier.report


class _Copier:
    def __init__(self, dest: Path, limits: CopyLimits) -> None:
        self.dest = dest
        self.limits = limits
        self.report = CopyReport()
        self.links: list[str] = []

    def copy_dir(self, dir_fd: int, relative: str, depth: int) -> None:
        if depth > self.limits.max_depth:
            raise WorkspaceError(f"{relative}: folders nest deeper than {self.limits.max_depth}")
        for name in sorted(os.listdir(dir_fd)):
            path = f"{relative}/{name}" if relative else name
            if name == "__pycache__" or name.endswith((".pyc", ".pyo")):
                self.report.skipped.append((path, "compiled Python is not copied"))
                continue
            self.copy_entry(dir_fd, name, path, depth)

    def copy_entry(self, dir_fd: int, name: str, path: str, depth: int) -> None:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            self.copy_link(os.readlink(name, dir_fd=dir_fd), path)
            return
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            self.report.skipped.append((path, "not a regular file, folder or link"))
            return
        try:
            fd = os.open(name, _DIR_FLAGS if stat.S_ISDIR(mode) else _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:  # e.g. swapped for a link since the stat (ELOOP)
            self.report.skipped.append((path, f"could not be opened without following links: {exc.strerror}"))
            return
        if stat.S_ISDIR(mode):
            try:
                (self.dest / path).mkdir(mode=0o755)
                self.copy_dir(fd, path, depth + 1)
            finally:
                os.close(fd)
        else:
            self.copy_file(fd, path)

    def copy_link(self, target: str, path: str) -> None:
        if os.path.isabs(target):
            self.report.skipped.append((path, f"link to an absolute path ({target})"))
            return
        self._count_entry()
        os.symlink(target, self.dest / path)
        self.links.append(path)
        self.report.links += 1

    def copy_file(self, fd: int, path: str) -> None:
        with os.fdopen(fd, "rb") as source:
            self._count_entry()
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):  # swapped for something else since the stat
                self.report.skipped.append((path, "not a regular file, folder or link"))
                return
            executable = bool(info.st_mode & 0o111)
            with open(self.dest / path, "xb") as target:
                while chunk := source.read(_CHUNK):
                    self.report.bytes += len(chunk)
                    if self.report.bytes > self.limits.max_bytes:
                        raise WorkspaceError(f"the workspace holds more than {self.limits.max_bytes} bytes")
                    target.write(chunk)
        os.chmod(self.dest / path, 0o755 if executable else 0o644)
        self.report.files += 1

    def _count_entry(self) -> None:
        if self.report.files + self.report.links >= self.limits.max_files:
            raise WorkspaceError(f"the workspace holds more than {self.limits.max_files} files and links")

    def drop_escaping_links(self) -> None:
        """Remove copied links that resolve outside the copy, until none do.

        Resolving in the copy (where every link is one we made) catches escapes that a lexical check misses,
        such as `a -> sub/up/..` with `sub/up -> ..`. Removing one link can change how others resolve, hence
        the loop.
        """
        root = os.path.realpath(self.dest)
        changed = True
        while changed:
            changed = False
            for path in list(self.links):
                resolved = os.path.realpath(self.dest / path)
                if resolved != root and not resolved.startswith(root + os.sep):
                    os.unlink(self.dest / path)
                    self.links.remove(path)
                    self.report.links -= 1
                    self.report.skipped.append((path, "link that leaves the workspace"))
                    changed = True
