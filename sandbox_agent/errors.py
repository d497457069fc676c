"""What can go wrong with a sandbox, as the callers of a backend see it."""

from __future__ import annotations


class SandboxError(Exception):
    """A sandbox operation failed (the engine refused, the sandbox misbehaved, a transfer broke)."""


class SandboxGone(SandboxError):
    """The sandbox does not exist or no longer runs: restore its last snapshot into a new one."""


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """A file asked for is not in the sandbox's workspace."""
