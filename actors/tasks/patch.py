"""Unified diffs: reading, applying and writing the reference solutions of tasks (`solution.patch`).

The applier is deliberately stricter than `git apply` and `patch -p1`: every hunk must match at exactly the
line it names, with all its context, and paths must stay inside the tree. Anything it accepts, those tools
accept too, so a task validated here also applies in a sandbox. It handles text files only; renames, copies
and binary patches are reported as unsupported rather than guessed at.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sandbox_agent.hosttree import UnsafeTree, open_folder, split_path

NO_NEWLINE = "\\ No newline at end of file"
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_UNSUPPORTED = ("rename from", "rename to", "copy from", "copy to", "GIT binary patch", "Binary files")
# Header lines git writes that carry nothing this applier needs (modes are not tracked by tasks).
_IGNORED = ("index ", "old mode", "new mode", "similarity index", "dissimilarity index")
_SAFE_PATH = re.compile(r"[^\s\"'\\]+")


class PatchError(ValueError):
    """The patch is malformed, unsafe or does not apply; `line` is 1-based in the patch (0: not known)."""

    def __init__(self, problem: str, line: int = 0) -> None:
        super().__init__(f"line {line}: {problem}" if line else problem)
        self.problem = problem
        self.line = line


@dataclass(frozen=True)
class Hunk:
    old_start: int
    new_start: int
    # (op, text) with op in " -+"; text keeps its line ending ("" at a file end without newline).
    lines: tuple[tuple[str, str], ...]

    def side(self, ops: str) -> list[str]:
        return [text for op, text in self.lines if op in ops]


@dataclass(frozen=True)
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: tuple[Hunk, ...]
    line: int  # where its header starts in the patch, for error messages

    @property
    def path(self) -> str:
        path = self.new_path or self.old_path
        assert path is not None
        return path


def check_path(path: str) -> str | None:
    """Why `path` cannot appear in a patch (or in a tree we write), or None."""
    if not _SAFE_PATH.fullmatch(path):
        return f"unsupported path {path!r} (whitespace, quotes or backslashes)"
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        return f"unsafe path {path!r} (absolute, or with an empty, '.' or '..' part)"
    if path.split("/")[0] == ".git":
        return f"unsafe path {path!r} (inside .git)"
    return None


def _strip_prefix(raw: str, line: int) -> str | None:
    name = raw.split("\t", 1)[0].rstrip("\r\n")
    if name == "/dev/null":
        return None
    if "/" not in name:
        raise PatchError(f"path {name!r} has no a/ or b/ prefix to strip (-p1)", line)
    path = name.split("/", 1)[1]
    problem = check_path(path)
    if problem:
        raise PatchError(problem, line)
    return path


def split_lines(text: str) -> list[str]:
    """Lines with their endings, split on "\\n" only (str.splitlines also splits on \\f, \\x1c, ...)."""
    lines = text.split("\n")
    out = [line + "\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.lines = split_lines(text)
        self.index = 0

    def peek(self) -> str | None:
        return self.lines[self.index] if self.index < len(self.lines) else None

    def at(self, prefix: str) -> bool:
        line = self.peek()
        return line is not None and line.startswith(prefix)

    def take(self) -> str:
        line = self.lines[self.index]
        self.index += 1
        return line

    @property
    def line_no(self) -> int:
        return self.index + 1


def parse_patch(text: str) -> tuple[FilePatch, ...]:
    """Every file section of a unified diff (plain or git-style), in order."""
    reader = _Reader(text)
    files: list[FilePatch] = []
    while (line := reader.peek()) is not None:
        if line.startswith(("diff --git ", "--- ")):
            files.append(_parse_file(reader))
        else:
            reader.take()  # commentary before, between or after file sections, as `git apply` allows
    if not files:
        raise PatchError("no file sections (--- / +++ headers) found")
    seen: set[str] = set()
    for file in files:
        if file.path in seen:
            raise PatchError(f"{file.path} is patched twice", file.line)
        seen.add(file.path)
    return tuple(files)


def _parse_file(reader: _Reader) -> FilePatch:
    start = reader.line_no
    if reader.at("diff --git "):
        reader.take()
        while (line := reader.peek()) is not None and not line.startswith(("--- ", "diff --git ")):
            if line.startswith(_UNSUPPORTED):
                raise PatchError(f"unsupported patch feature: {line.strip()}", reader.line_no)
            if not line.startswith((*_IGNORED, "new file mode", "deleted file mode")):
                raise PatchError(f"unexpected line in a git header: {line.rstrip()!r}", reader.line_no)
            reader.take()
    if not reader.at("--- "):
        raise PatchError(
            "a git header without ---/+++ lines (empty files and mode changes are unsupported)", start
        )
    old = _strip_prefix(reader.take()[4:], reader.line_no - 1)
    if not reader.at("+++ "):
        raise PatchError("'---' line not followed by a '+++' line", reader.line_no)
    new = _strip_prefix(reader.take()[4:], reader.line_no - 1)
    if old is None and new is None:
        raise PatchError("both sides are /dev/null", start)
    if old is not None and new is not None and old != new:
        raise PatchError(f"renames are unsupported ({old} -> {new})", start)
    hunks = tuple(_parse_hunks(reader))
    if not hunks:
        raise PatchError(f"{new or old}: no hunks", start)
    return FilePatch(old, new, hunks, start)


def _parse_hunks(reader: _Reader) -> Iterator[Hunk]:
    while (line := reader.peek()) is not None and line.startswith("@@"):
        match = _HUNK.match(line)
        if not match:
            raise PatchError(f"malformed hunk header {line.rstrip()!r}", reader.line_no)
        reader.take()
        old_start, old_len, new_start, new_len = (int(g) if g is not None else 1 for g in match.groups())
        yield Hunk(old_start, new_start, tuple(_hunk_body(reader, old_len, new_len)))
        after = reader.peek()
        # A diff line right after a complete hunk means the header's counts are wrong: refuse rather than
        # silently drop the line (it would be read as commentary otherwise).
        if after is not None and after[:1] in ("+", "-", " ") and not after.startswith("--- "):
            raise PatchError("hunk has more lines than its header says", reader.line_no)


def _hunk_body(reader: _Reader, old_left: int, new_left: int) -> list[tuple[str, str]]:
    body: list[tuple[str, str]] = []
    while old_left > 0 or new_left > 0:
        line = reader.peek()
        if line is None:
            raise PatchError("hunk ends early (fewer lines than its header says)", reader.line_no)
        reader.take()
        # Some tools write an empty context line as a bare newline; git accepts it, so do we.
        op, text = (" ", line) if line in ("\n", "\r\n") else (line[0], line[1:])
        if op == "\\":
            raise PatchError("'\\ No newline' marker in the middle of a hunk", reader.line_no - 1)
        if op not in " -+":
            raise PatchError(f"hunk line starts with {op!r} (expected ' ', '-' or '+')", reader.line_no - 1)
        old_left -= op in " -"
        new_left -= op in " +"
        if old_left < 0 or new_left < 0:
            raise PatchError("hunk has more lines than its header says", reader.line_no - 1)
        body.append((op, text))
        _no_newline_marker(reader, body)
    return body


def _no_newline_marker(reader: _Reader, body: list[tuple[str, str]]) -> None:
    marker = reader.peek()
    if marker is not None and marker.startswith("\\"):
        reader.take()
        op, text = body[-1]
        body[-1] = (op, text.removesuffix("\n"))


def apply_patch(
    patch: str | tuple[FilePatch, ...], read: Callable[[str], str | None]
) -> dict[str, str | None]:
    """The files a patch changes: path -> new text, or None for a deleted file.

    `read(path)` returns the current text of a file, or None when it does not exist.
    """
    files = parse_patch(patch) if isinstance(patch, str) else patch
    changes: dict[str, str | None] = {}
    for file in files:
        current = read(file.path)
        if file.old_path is None and current is not None:
            raise PatchError(f"{file.path}: the patch creates it, but it already exists", file.line)
        if file.old_path is not None and current is None:
            raise PatchError(f"{file.path}: the patch changes it, but it does not exist", file.line)
        result = _apply_hunks(file, current or "")
        if file.new_path is None and result:
            raise PatchError(
                f"{file.path}: deleting it leaves {len(result)} characters unaccounted for", file.line
            )
        changes[file.path] = None if file.new_path is None else result
    return changes


def reverse_patch(patch: str | tuple[FilePatch, ...]) -> tuple[FilePatch, ...]:
    """The patch that undoes `patch`: applied to what `patch` makes, it gives back what it was applied to."""
    files = parse_patch(patch) if isinstance(patch, str) else patch
    undo = {"+": "-", "-": "+", " ": " "}
    return tuple(
        FilePatch(
            old_path=file.new_path,
            new_path=file.old_path,
            hunks=tuple(
                Hunk(hunk.new_start, hunk.old_start, tuple((undo[op], text) for op, text in hunk.lines))
                for hunk in file.hunks
            ),
            line=file.line,
        )
        for file in files
    )


def _apply_hunks(file: FilePatch, text: str) -> str:
    old = split_lines(text)
    out: list[str] = []
    cursor = 0  # index in `old` of the next line not yet copied
    for hunk in file.hunks:
        expected = hunk.side(" -")
        # A hunk that only adds lines names the line *after which* it inserts.
        start = hunk.old_start - 1 if expected else hunk.old_start
        if start < cursor or old[start : start + len(expected)] != expected:
            raise PatchError(
                f"{file.path}: hunk at line {hunk.old_start} does not match the file (no fuzz is allowed)",
                file.line,
            )
        out.extend(old[cursor:start])
        out.extend(hunk.side(" +"))
        cursor = start + len(expected)
    out.extend(old[cursor:])
    return "".join(out)


def read_tree_file(root: Path) -> Callable[[str], str | None]:
    """A `read` callback for `apply_patch` over a folder; symlinks are never followed.

    A patched path that is a link, or lies under one (`p/x` with `p -> ../..`), is a PatchError: reading
    through it could read any file on the host, and writing through it would write there.
    """

    def read(path: str) -> str | None:
        folders, name = split_path(path)
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            try:
                parent = open_folder(root_fd, folders, create=False, where=path)
            except FileNotFoundError:
                return None
        except UnsafeTree:
            raise _under_link(path) from None
        finally:
            os.close(root_fd)
        try:
            try:
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(mode):
                raise _is_link(path)
            if not stat.S_ISREG(mode):
                return None
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
            with os.fdopen(fd, "rb") as handle:
                return handle.read().decode("utf-8")
        finally:
            os.close(parent)

    return read


def _under_link(path: str) -> PatchError:
    return PatchError(f"{path} lies under a symbolic link or a file; patches may only change regular files")


def _is_link(path: str) -> PatchError:
    return PatchError(f"{path} is a symbolic link; patches may only change regular files")


def apply_to_tree(root: Path, patch: str | tuple[FilePatch, ...]) -> dict[str, str | None]:
    """Apply a patch in place to the folder `root`; returns the changes it made.

    Writes go through folder descriptors opened with O_NOFOLLOW (`sandbox_agent.hosttree.open_folder`):
    a link anywhere on a patched path is a PatchError, never followed, so the patch cannot write outside
    `root` even if the tree holds links the static checks let through.
    """
    changes = apply_patch(patch, read_tree_file(root))
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for path, text in changes.items():
            _write_change(root_fd, path, text)
    finally:
        os.close(root_fd)
    return changes


def _write_change(root_fd: int, path: str, text: str | None) -> None:
    folders, name = split_path(path)
    try:
        parent = open_folder(root_fd, folders, create=text is not None, where=path)
    except UnsafeTree:
        raise _under_link(path) from None
    try:
        if text is None:
            os.unlink(name, dir_fd=parent)  # unlink never follows the last component
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, 0o666, dir_fd=parent)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _is_link(path) from None
            raise
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
    finally:
        os.close(parent)


def make_patch(before: Mapping[str, str], after: Mapping[str, str], context: int = 3) -> str:
    """A git-style unified diff from `before` to `after` (path -> text), which `git apply` accepts."""
    sections: list[str] = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        problem = check_path(path)
        if problem:
            raise PatchError(problem)
        if old == "" or new == "":
            raise PatchError(f"{path}: empty files cannot be created or deleted by a text patch")
        sections.append(_file_section(path, old, new, context))
    return "".join(sections)


def _file_section(path: str, old: str | None, new: str | None, context: int) -> str:
    head = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        head.append("new file mode 100644\n")
    if new is None:
        head.append("deleted file mode 100644\n")
    head.append(f"--- {'/dev/null' if old is None else 'a/' + path}\n")
    head.append(f"+++ {'/dev/null' if new is None else 'b/' + path}\n")
    a, b = split_lines(old or ""), split_lines(new or "")
    body: list[str] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        body.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                body.extend(_diff_line(" ", line) for line in a[i1:i2])
                continue
            body.extend(_diff_line("-", line) for line in a[i1:i2])
            body.extend(_diff_line("+", line) for line in b[j1:j2])
    return "".join(head + body)


def _range(start: int, stop: int) -> str:
    # The unified-diff convention (as in difflib): an empty range names the line before it.
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start if length == 0 else start + 1},{length}"


def _diff_line(op: str, line: str) -> str:
    return op + line if line.endswith("\n") else f"{op}{line}\n{NO_NEWLINE}\n"
