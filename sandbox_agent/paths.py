"""Paths inside a sandbox's workspace: every path trialog writes or reads there is checked here first."""

from __future__ import annotations

WORKSPACE = "/workspace"


class PathOutsideWorkspace(ValueError):
    """A path that leaves the workspace ('..', an absolute path elsewhere) or names nothing."""


def workspace_relative(path: str) -> str:
    """The canonical relative form: 'a/b' for 'a/b', './a//b/' and '/workspace/a/b'."""
    if "\0" in path:
        raise PathOutsideWorkspace(f"a path with a NUL byte: {path!r}")
    if path.startswith(WORKSPACE + "/"):
        path = path[len(WORKSPACE) + 1 :]
    elif path.startswith("/"):
        raise PathOutsideWorkspace(f"{path!r} is outside {WORKSPACE}")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathOutsideWorkspace(f"{path!r} climbs out with '..'")
    if not parts:
        raise PathOutsideWorkspace(f"{path!r} names the workspace itself, not a file in it")
    return "/".join(parts)


def ancestors(path: str) -> list[str]:
    """'a', 'a/b' for 'a/b/c': the folders a relative path lies in."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]
