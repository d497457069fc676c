"""Commands through `docker exec`: the path taken when a sandbox has no exec channel (see exec_channel).

One exec on the raw attach socket: stdin streamed in, stdout and stderr demultiplexed as they arrive, and
a deadline kept by the host, so that a sandbox that never closes its streams cannot hold the caller (the
docker SDK's `exec_run` buffers everything and has no deadline). An agent's command runs under
`timeout -s KILL` in its own process group, which a small shell wrapper kills when the command ends.
"""

from __future__ import annotations

import re
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from docker.errors import APIError, NotFound

from sandbox_agent.errors import SandboxError, SandboxGone

KILLED_EXIT_CODE = 137  # 128 + SIGKILL
# "$0" is the timeout, "$@" the command. The command runs in the background only so that its process
# group id is known ($!, as `timeout` makes itself a group leader); stdin is passed on through fd 3
# because a background job's stdin is otherwise /dev/null.
GROUP_WRAPPER = (
    'exec 3<&0; timeout -s KILL "$0" "$@" <&3 3<&- & pid=$!; exec 3<&-; '
    "wait $pid; rc=$?; kill -KILL -$pid 2>/dev/null; exit $rc"
)
# `kill -1` signals every process but the caller and PID 1, which is all the sandbox's user has left. Again
# and again, with shell builtins only (no fork: a fork bomb may hold every pid), until none is left to
# signal: one pass misses what a fork bomb forks while it runs. It says SWEPT only when it ran to the end
# (an exec refused for want of a pid ends with an exit code too, and must not pass for a sweep).
SWEPT = b"swept\n"
KILL_STRAGGLERS_ARGV = [
    "sh", "-c",
    "i=0; while [ $i -lt 1000 ] && kill -KILL -1 2>/dev/null; do i=$((i+1)); done; "
    "[ $i -lt 1000 ] && echo swept",
]  # fmt: skip
OOM_COUNTER_ARGV = [
    "sh",
    "-c",
    "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null; true",
]

_HEADER = struct.Struct(">BxxxI")  # stream (1 stdout, 2 stderr), 3 padding bytes, payload size
_RECV_BYTES = 256 * 1024
_EXIT_CODE_WAIT_S = 2.0


class Sink(Protocol):
    def write(self, data: bytes) -> None: ...


class ByteSink:
    """All the bytes of a stream, up to `max_bytes`; past that it only counts (`overflowed`)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.data = bytearray()
        self.total = 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.max_bytes - len(self.data)
        if room > 0:
            self.data += data[:room]

    @property
    def overflowed(self) -> bool:
        return self.total > self.max_bytes


class FrameDemux:
    """Splits Docker's multiplexed stream (8-byte header, then payload) into (stream, payload) pieces."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._stream = 0
        self._left = 0  # payload bytes of the current frame not yet seen

    def feed(self, chunk: bytes) -> list[tuple[int, bytes]]:
        pieces: list[tuple[int, bytes]] = []
        view = memoryview(chunk)
        while view:
            if self._left:
                take = view[: self._left]
                pieces.append((self._stream, bytes(take)))
                self._left -= len(take)
                view = view[len(take) :]
                continue
            need = _HEADER.size - len(self._pending)
            self._pending += view[:need]
            view = view[need:]
            if len(self._pending) == _HEADER.size:
                self._stream, self._left = _HEADER.unpack(self._pending)
                self._pending.clear()
        return pieces


@dataclass(frozen=True, slots=True)
class ExecOutcome:
    exit_code: int | None  # None when the deadline passed before the streams closed
    duration_s: float

    @property
    def hung(self) -> bool:
        return self.exit_code is None


def run_exec(
    api: Any,
    container_id: str,
    argv: Sequence[str],
    *,
    stdout: Sink,
    stderr: Sink,
    deadline_s: float,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    user: str = "",
) -> ExecOutcome:
    """Run `argv` in the container; stream its output into the sinks until it ends or `deadline_s` passes."""
    try:
        exec_id = api.exec_create(
            container_id,
            list(argv),
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            environment=env,
            user=user,
        )["Id"]
        started = time.monotonic()
        response = api.exec_start(exec_id, socket=True)
    except (APIError, NotFound) as exc:
        raise _translated(exc, container_id) from exc
    raw: socket.socket = getattr(response, "_sock", response)
    writer = _start_writer(raw, stdin) if stdin is not None else None
    try:
        finished = _pump(raw, stdout, stderr, started + deadline_s)
    finally:
        raw.close()
        if writer is not None:
            writer.join(timeout=1.0)
    duration = time.monotonic() - started
    return ExecOutcome(_exit_code(api, exec_id) if finished else None, duration)


def _pump(raw: socket.socket, stdout: Sink, stderr: Sink, deadline: float) -> bool:
    """Read frames until the stream ends (True) or the deadline passes (False)."""
    demux = FrameDemux()
    sinks = {1: stdout, 2: stderr}
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        readable, _, _ = select.select([raw], [], [], remaining)
        if not readable:
            return False
        try:
            chunk = raw.recv(_RECV_BYTES)
        except ConnectionError:
            return True
        if not chunk:
            return True
        for stream, payload in demux.feed(chunk):
            if stream in sinks:
                sinks[stream].write(payload)


def _start_writer(raw: socket.socket, data: bytes) -> threading.Thread:
    def write() -> None:
        try:
            raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)  # end of stdin for the process
        except OSError:
            pass  # the process ended (or was killed) before reading all of its input

    thread = threading.Thread(target=write, name="sandbox-exec-stdin", daemon=True)
    thread.start()
    return thread


def _exit_code(api: Any, exec_id: str) -> int:
    # The streams close a moment before the engine records the exit: poll briefly for it.
    give_up = time.monotonic() + _EXIT_CODE_WAIT_S
    while True:
        info = api.exec_inspect(exec_id)
        if not info["Running"] and info["ExitCode"] is not None:
            return int(info["ExitCode"])
        if time.monotonic() > give_up:
            raise SandboxError(f"exec {exec_id[:12]} closed its streams but reports no exit code")
        time.sleep(0.005)


def _translated(exc: APIError, container_id: str) -> SandboxError:
    status = getattr(exc, "status_code", None)
    if isinstance(exc, NotFound) or status == 409:  # 409: the container exists but is not running
        return SandboxGone(f"sandbox {container_id[:12]} is gone: {exc.explanation or exc}")
    return SandboxError(f"docker exec in {container_id[:12]} failed: {exc.explanation or exc}")


def judged_timed_out(exit_code: int | None, duration_s: float, timeout_s: float) -> bool:
    """Killed by `timeout` (SIGKILL once the time was up), or still holding its streams at the deadline."""
    return exit_code is None or (exit_code == KILLED_EXIT_CODE and duration_s >= timeout_s)


def oom_kill_count(counters: bytes) -> int:
    """The `oom_kill N` figure of cgroup v1's memory.oom_control or cgroup v2's memory.events."""
    match = re.search(rb"^oom_kill (\d+)$", counters, re.MULTILINE)
    return int(match.group(1)) if match else 0
