"""The sandbox backend interface: what trialog needs from anything that runs untrusted code.

A backend creates sandboxes from a `SandboxSpec`, runs commands in them with per-exec limits, moves files
in and out of the workspace, gives read-only inputs (a harness, frozen tests) outside it, snapshots the
workspace into the object store (content-addressed: the same tree gives the same id, on any backend),
restores a snapshot into any sandbox, and destroys sandboxes. Every backend must pass the contract tests
in tests/integration/sandbox/test_backend_contract.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from sandbox_agent.limits import ExecLimits, SandboxSpec
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.results import ExecResult

DEFAULT_EXEC_LIMITS = ExecLimits()


@dataclass(frozen=True, slots=True)
class Sandbox:
    """A handle on one sandbox: its backend's id for it and what it was made from."""

    id: str
    spec: SandboxSpec


class SandboxBackend(Protocol):
    @property
    def workspace_path(self) -> str:
        """How commands name the workspace (they also start in it)."""
        ...

    def create(self, spec: SandboxSpec) -> Sandbox:
        """A started sandbox with an empty workspace, ready for `exec`."""
        ...

    def exec(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        *,
        limits: ExecLimits = DEFAULT_EXEC_LIMITS,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run `argv` in the workspace; its process group is killed when it ends or its time is up."""
        ...

    def write_files(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> None:
        """Write files at workspace-relative paths (folders are created as needed)."""
        ...

    def write_inputs(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> str:
        """Write read-only inputs (a test harness, frozen tests) outside the workspace, where the sandbox's
        user can read but not change them; returns the folder's path as commands name it."""
        ...

    def read_file(self, sandbox: Sandbox, path: str) -> bytes:
        """A file's bytes; SandboxFileNotFound if there is none."""
        ...

    def snapshot(self, sandbox: Sandbox) -> SnapshotId:
        """Store the workspace tree in the object store; the id restores it anywhere that store is read."""
        ...

    def restore(self, sandbox: Sandbox, snapshot_id: SnapshotId) -> None:
        """Make the workspace exactly the snapshot's tree (what was there before is removed)."""
        ...

    def destroy(self, sandbox: Sandbox) -> None:
        """Remove the sandbox and everything in it; destroying a sandbox already gone is not an error."""
        ...
