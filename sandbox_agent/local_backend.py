"""A backend that runs commands as plain host processes in a temporary folder. NO ISOLATION.

It exists to test what sits above a backend (pool, idempotent steps, worker, CLI plumbing) without Docker,
and it passes the same contract tests as the Docker backend, so its behaviour stands for a backend's.
It must never run untrusted code: nothing stops a command from reading or writing anything on the host.
Quotas other than the exec limits are not enforced; `oom_killed` is always false.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from sandbox_agent.backend import DEFAULT_EXEC_LIMITS, Sandbox
from sandbox_agent.errors import SandboxError, SandboxFileNotFound, SandboxGone
from sandbox_agent.hosttree import clear_folder, read_tree, write_tree
from sandbox_agent.limits import ExecLimits, SandboxSpec
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.output import BoundedOutput
from sandbox_agent.paths import workspace_relative
from sandbox_agent.results import ExecResult
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import ObjectStore

_POLL_S = 0.02  # how often the reader looks whether the command itself has exited


class LocalProcessBackend:
    def __init__(self, objects: ObjectStore, root: Path | None = None) -> None:
        self.snapshots = SnapshotStore(objects)
        self._root = root or Path(tempfile.mkdtemp(prefix="trialog-local-sandboxes-"))

    @property
    def workspace_path(self) -> str:
        return "."  # commands start in the workspace

    def _workspace(self, sandbox: Sandbox) -> Path:
        folder = self._root / sandbox.id
        if not folder.is_dir():
            raise SandboxGone(f"sandbox {sandbox.id} is gone")
        return folder

    def create(self, spec: SandboxSpec) -> Sandbox:
        sandbox = Sandbox(uuid.uuid4().hex, spec)
        (self._root / sandbox.id).mkdir(parents=True)
        return sandbox

    def destroy(self, sandbox: Sandbox) -> None:
        for folder in (self._root / sandbox.id, self._inputs(sandbox)):
            if folder.is_dir():
                clear_folder(folder)
                folder.rmdir()

    def _inputs(self, sandbox: Sandbox) -> Path:
        return self._root / f"{sandbox.id}.inputs"

    def exec(
        self,
        sandbox: Sandbox,
        argv: Sequence[str],
        *,
        limits: ExecLimits = DEFAULT_EXEC_LIMITS,
        stdin: bytes | None = None,
    ) -> ExecResult:
        if not argv:
            raise ValueError("an empty command")
        stdout, stderr = BoundedOutput(limits.output_bytes), BoundedOutput(limits.output_bytes)
        started = time.monotonic()
        try:
            process = subprocess.Popen(
                list(argv),
                cwd=self._workspace(sandbox),
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, killed as a whole
            )
        except OSError as exc:
            return ExecResult(127, "", f"{argv[0]}: {exc.strerror}\n", duration_s=time.monotonic() - started)
        if stdin is not None and process.stdin is not None:
            _feed(process.stdin, stdin)
        finished = _pump(process, stdout, stderr, started + limits.timeout_s)
        _kill_group(process.pid)
        code = process.wait()
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
        return ExecResult(
            exit_code=128 - code if code < 0 else code,  # -9 (killed by SIGKILL) reads 137, as in a shell
            stdout=stdout.text(),
            stderr=stderr.text(),
            timed_out=not finished,
            stdout_dropped=stdout.dropped,
            stderr_dropped=stderr.dropped,
            stdout_bytes=stdout.total,
            stderr_bytes=stderr.total,
            duration_s=time.monotonic() - started,
        )

    def write_files(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> None:
        workspace = self._workspace(sandbox)
        for path, body in files.items():
            target = workspace / workspace_relative(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(body)

    def write_inputs(self, sandbox: Sandbox, files: Mapping[str, bytes]) -> str:
        """Read-only files (mode 0444) beside the workspace; nothing stops a host process from changing
        them, as nothing isolates this backend."""
        self._workspace(sandbox)
        inputs = self._inputs(sandbox)
        for path, body in files.items():
            target = inputs / workspace_relative(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                target.chmod(0o644)
            target.write_bytes(body)
            target.chmod(0o444)
        return str(inputs)

    def read_file(self, sandbox: Sandbox, path: str) -> bytes:
        target = self._workspace(sandbox) / workspace_relative(path)
        try:
            return target.read_bytes()
        except FileNotFoundError:
            raise SandboxFileNotFound(f"{path} is not in the workspace") from None
        except OSError as exc:
            raise SandboxError(f"reading {path} failed: {exc}") from exc

    def snapshot(self, sandbox: Sandbox) -> SnapshotId:
        manifest, contents = read_tree(self._workspace(sandbox))
        return self.snapshots.save(manifest, contents)

    def restore(self, sandbox: Sandbox, snapshot_id: SnapshotId) -> None:
        manifest = self.snapshots.load(snapshot_id)
        write_tree(self._workspace(sandbox), manifest, self.snapshots.content)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    def write() -> None:
        try:
            pipe.write(data)
            pipe.close()
        except OSError:
            pass  # the process ended before reading all of its input

    threading.Thread(target=write, name="local-exec-stdin", daemon=True).start()


def _pump(
    process: subprocess.Popen[bytes], stdout: BoundedOutput, stderr: BoundedOutput, deadline: float
) -> bool:
    """Copy the process's output into the caps until both streams close (True) or time is up (False).

    When the command itself exits, its group is killed at once, so that background jobs holding the
    streams open neither outlive it nor keep the caller waiting (as in the Docker backend)."""
    selector = selectors.DefaultSelector()
    for pipe, sink in ((process.stdout, stdout), (process.stderr, stderr)):
        if pipe is not None:
            selector.register(pipe, selectors.EVENT_READ, sink)
    try:
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if process.poll() is not None:
                _kill_group(process.pid)
            for key, _ in selector.select(min(remaining, _POLL_S)):
                chunk = os.read(key.fd, 256 * 1024)
                if chunk:
                    key.data.write(chunk)
                else:
                    selector.unregister(key.fileobj)
        return True
    finally:
        selector.close()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, signal.SIGKILL)
