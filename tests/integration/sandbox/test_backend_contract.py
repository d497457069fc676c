"""The contract every sandbox backend keeps (run against each backend of the `backend` fixture)."""

from __future__ import annotations

import time

import pytest

from sandbox_agent.backend import Sandbox, SandboxBackend
from sandbox_agent.errors import SandboxFileNotFound, SandboxGone
from sandbox_agent.limits import ExecLimits
from sandbox_agent.manifest import SnapshotId
from sandbox_agent.paths import PathOutsideWorkspace
from tests.integration.sandbox.conftest import MakeSandbox

# A tree with what trips naive copies up: nested and empty folders, modes, a read-only folder, binary
# content, links (relative, absolute, dangling), names with spaces, newlines, a leading dash, non-UTF-8.
BUILD_TREE = r"""
set -e
mkdir -p src/pkg empty ro/inner
printf 'print("hi")\n' > src/pkg/main.py
printf '#!/bin/sh\necho run\n' > run.sh && chmod 755 run.sh
printf 'secret' > private && chmod 600 private
head -c 3000 /dev/urandom > blob.bin
printf 'x' > ro/inner/file && chmod 555 ro
ln -s src/pkg/main.py link-to-main
ln -s /etc/hostname absolute-link
ln -s nowhere dangling
printf 'odd' > 'with space' && printf 'nl' > "$(printf 'new\nline')" && printf 'dash' > ./-rf
printf 'latin' > "$(printf 'caf\351')"
"""


def sh(backend: SandboxBackend, sandbox: Sandbox, script: str) -> str:
    result = backend.exec(sandbox, ["sh", "-c", script])
    assert result.exit_code == 0, result
    return result.stdout


def test_exec_reports_exit_code_and_separate_streams(backend: SandboxBackend, sandbox: Sandbox) -> None:
    result = backend.exec(sandbox, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not (result.timed_out or result.oom_killed or result.truncated)
    assert result.duration_s > 0


def test_exec_passes_stdin_and_runs_in_the_workspace(backend: SandboxBackend, sandbox: Sandbox) -> None:
    result = backend.exec(sandbox, ["sh", "-c", "cat > note && wc -c < note"], stdin=b"x" * 100_000)
    assert result.stdout.strip() == "100000"
    assert backend.read_file(sandbox, "note") == b"x" * 100_000


def test_a_missing_command_fails_with_127(backend: SandboxBackend, sandbox: Sandbox) -> None:
    assert backend.exec(sandbox, ["no-such-command-here"]).exit_code in (126, 127)


def test_timeout_kills_the_whole_process_group(backend: SandboxBackend, sandbox: Sandbox) -> None:
    script = "(sleep 3; echo late > late) & echo started; sleep 60"
    result = backend.exec(sandbox, ["sh", "-c", script], limits=ExecLimits(timeout_s=1.0))
    assert result.timed_out and result.exit_code == 137
    assert result.stdout == "started\n"
    time.sleep(3.5)  # the background job would have written its file by now
    assert backend.exec(sandbox, ["sh", "-c", "ls"]).stdout == ""


def test_background_jobs_do_not_outlive_their_exec(backend: SandboxBackend, sandbox: Sandbox) -> None:
    result = backend.exec(sandbox, ["sh", "-c", "(sleep 2; echo late > late) & exit 0"])
    assert result.exit_code == 0 and not result.timed_out
    time.sleep(2.5)
    assert backend.exec(sandbox, ["sh", "-c", "ls"]).stdout == ""


def test_output_is_cut_to_the_cap_with_a_marker(backend: SandboxBackend, sandbox: Sandbox) -> None:
    script = "printf 'HEAD'; head -c 200000 /dev/zero | tr '\\0' m; printf 'TAIL'; echo e >&2"
    result = backend.exec(sandbox, ["sh", "-c", script], limits=ExecLimits(output_bytes=1000))
    assert result.truncated and result.stdout_dropped == 200_008 - 1000
    assert result.stdout.startswith("HEAD") and result.stdout.endswith("TAIL")
    assert f"[... {200_008 - 1000} bytes dropped by trialog ...]" in result.stdout
    assert result.stderr == "e\n" and result.stderr_dropped == 0


def test_files_round_trip_and_are_seen_by_commands(backend: SandboxBackend, sandbox: Sandbox) -> None:
    payload = bytes(range(256)) * 40
    backend.write_files(sandbox, {"deep/er/data.bin": payload, "top.txt": b"top\n"})
    assert backend.read_file(sandbox, "deep/er/data.bin") == payload
    assert backend.read_file(sandbox, "/workspace/top.txt") == b"top\n"
    assert sh(backend, sandbox, "cat top.txt && wc -c < deep/er/data.bin").split() == ["top", "10240"]


def test_reading_a_missing_file_raises(backend: SandboxBackend, sandbox: Sandbox) -> None:
    with pytest.raises(SandboxFileNotFound):
        backend.read_file(sandbox, "absent.txt")


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", "", "/workspace"])
def test_paths_outside_the_workspace_are_refused(
    backend: SandboxBackend, sandbox: Sandbox, path: str
) -> None:
    with pytest.raises(PathOutsideWorkspace):
        backend.write_files(sandbox, {path: b"x"})
    with pytest.raises(PathOutsideWorkspace):
        backend.read_file(sandbox, path)


def test_snapshot_ids_are_content_addressed(backend: SandboxBackend, sandbox: Sandbox) -> None:
    empty = backend.snapshot(sandbox)
    sh(backend, sandbox, "echo one > a.txt")
    first = backend.snapshot(sandbox)
    assert backend.snapshot(sandbox) == first  # unchanged: same id
    sh(backend, sandbox, "echo two > a.txt")
    assert backend.snapshot(sandbox) != first
    sh(backend, sandbox, "echo one > a.txt")  # back to the same content (new inode and times)
    assert backend.snapshot(sandbox) == first
    sh(backend, sandbox, "chmod 700 a.txt")
    assert backend.snapshot(sandbox) not in (first, empty)
    sh(backend, sandbox, "rm a.txt")
    assert backend.snapshot(sandbox) == empty


def test_restore_into_a_new_sandbox_gives_an_identical_tree(
    backend: SandboxBackend, make_sandbox: MakeSandbox
) -> None:
    source, target = make_sandbox(), make_sandbox()
    sh(backend, source, BUILD_TREE)
    snapshot = backend.snapshot(source)
    backend.restore(target, snapshot)
    assert backend.snapshot(target) == snapshot
    assert backend.read_file(target, "blob.bin") == backend.read_file(source, "blob.bin")
    listing = "ls -lR | grep -v '^total' | cut -c1-10; find . | sort | od -c | tail -3"
    assert sh(backend, target, listing) == sh(backend, source, listing)


def test_restore_replaces_what_was_there(backend: SandboxBackend, sandbox: Sandbox) -> None:
    sh(backend, sandbox, "echo keep > keep.txt")
    snapshot = backend.snapshot(sandbox)
    sh(backend, sandbox, "echo changed > keep.txt; mkdir -p junk/ro && touch junk/ro/x && chmod 555 junk/ro")
    backend.restore(sandbox, snapshot)
    assert sh(backend, sandbox, "ls; cat keep.txt") == "keep.txt\nkeep\n"
    assert backend.snapshot(sandbox) == snapshot


def test_restoring_an_unknown_snapshot_fails(backend: SandboxBackend, sandbox: Sandbox) -> None:
    with pytest.raises(Exception, match="missing"):
        backend.restore(sandbox, SnapshotId("0" * 64, 10))


def test_a_destroyed_sandbox_is_gone(backend: SandboxBackend, make_sandbox: MakeSandbox) -> None:
    sandbox = make_sandbox()
    backend.destroy(sandbox)
    with pytest.raises(SandboxGone):
        backend.exec(sandbox, ["true"])
    backend.destroy(sandbox)  # twice is fine


def test_inputs_are_readable_outside_the_workspace_and_not_snapshotted(
    backend: SandboxBackend, sandbox: Sandbox
) -> None:
    empty = backend.snapshot(sandbox)
    inputs = backend.write_inputs(
        sandbox, {"harness.py": b"print('harness')\n", "tests/test_a.py": b"X = 1\n"}
    )
    result = backend.exec(sandbox, ["python3", f"{inputs}/harness.py", backend.workspace_path])
    assert result.stdout == "harness\n"
    assert sh(backend, sandbox, f"cat {inputs}/tests/test_a.py") == "X = 1\n"
    assert backend.snapshot(sandbox) == empty  # inputs are not part of the workspace
    with pytest.raises(PathOutsideWorkspace):
        backend.write_inputs(sandbox, {"../escape": b"x"})
