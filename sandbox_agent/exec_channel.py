"""The host's end of a sandbox's exec server (exec_server.py, the container's PID 1).

Requests go down the container's attach stream (its stdin) and answers come back on its stdout, framed
by request id, so that bytes left over from an earlier client are skipped rather than misread. One request
at a time per channel; the host keeps its own deadline on top of the server's, so a wedged sandbox cannot
hold the caller.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docker.errors import APIError, NotFound

from sandbox_agent.docker_exec import FrameDemux, Sink
from sandbox_agent.errors import SandboxError, SandboxGone
from sandbox_agent.exec_server import FRAME
from sandbox_agent.output import BoundedOutput

SERVER_SOURCE = Path(__file__).with_name("exec_server.py").read_text()
# -I: ignore the environment and the user's site; -S: no site module (faster start, nothing to import).
SERVER_COMMAND = ["python3", "-I", "-S", "-c", SERVER_SOURCE]


def server_command(agent_uid: int, agent_gid: int) -> list[str]:
    """The container's command: the server, told which uid and gid the commands it runs must have."""
    return [*SERVER_COMMAND, str(agent_uid), str(agent_gid)]


_RECV_BYTES = 256 * 1024
_ATTACH = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
_request_ids = itertools.count(int.from_bytes(os.urandom(4), "big") << 20)


class ChannelBroken(SandboxError):
    """The channel cannot be trusted any more (its stream ended, or it ran past the host's deadline)."""


class ChannelTimeout(ChannelBroken):
    """No answer within the host's deadline: the server or the sandbox is wedged."""


@dataclass(frozen=True, slots=True)
class ServerHello:
    hardened: bool  # non-dumpable: no ptrace, no /proc/1/fd for processes of its uid
    isolated: bool  # root, running commands as the agent's uid and killing all of them after each


@dataclass(frozen=True, slots=True)
class ChannelResult:
    exit_code: int
    timed_out: bool
    oom_kills: int
    stdout: BoundedOutput | None  # mode "cap" only: the streams as the server cut them
    stderr: BoundedOutput | None
    duration_s: float
    left_running: int | None = None  # the agent's processes alive when the command ended (then killed)
    memory_peak: int | None = None  # the sandbox's memory high-water mark, bytes, after the command


class ExecChannel:
    def __init__(self, raw: socket.socket, *, multiplexed: bool = True) -> None:
        self._raw = raw
        # Docker wraps an attached container's stdout in its own frames; a plain pipe (tests) does not.
        self._demux = FrameDemux() if multiplexed else None
        self._pending = bytearray()
        self._lock = threading.Lock()
        self.broken = False

    @classmethod
    def attach(cls, api: Any, container_id: str) -> ExecChannel:
        """Attach to the container's stdin and stdout (before it starts, so nothing is missed)."""
        try:
            response = api.attach_socket(container_id, params=_ATTACH)
        except NotFound as exc:
            raise SandboxGone(f"sandbox {container_id[:12]} is gone") from exc
        except APIError as exc:
            raise SandboxError(f"cannot attach to sandbox {container_id[:12]}: {exc.explanation}") from exc
        return cls(getattr(response, "_sock", response))

    def close(self) -> None:
        self.broken = True
        self._raw.close()

    # -- requests ------------------------------------------------------------------------------------

    def hello(self, deadline_s: float) -> ServerHello:
        """Wait for the hello the server sends when it starts: could it harden and isolate itself."""
        for kind, payload in self._frames(0, time.monotonic() + deadline_s):
            if kind == b"h":
                said = json.loads(payload)
                return ServerHello(bool(said["hardened"]), bool(said.get("isolated", False)))
        raise ChannelBroken("no hello from the sandbox's exec server")  # pragma: no cover - _frames raises

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        deadline_s: float,
        stdin: bytes | None = None,
        cap: int | None = None,
        stdout: Sink | None = None,
        stderr: Sink | None = None,
    ) -> ChannelResult:
        """Run `argv`; with `cap`, the server keeps head and tail of each stream, else streams into sinks."""
        if self.broken:
            raise ChannelBroken("the channel is closed")
        request_id = next(_request_ids)
        header = {
            "id": request_id,
            "argv": list(argv),
            "timeout": timeout_s,
            "stdin": len(stdin or b""),
            "mode": "cap" if cap is not None else "stream",
            "cap": cap or 0,
        }
        sinks = {b"o": stdout, b"e": stderr}
        with self._lock:
            started = time.monotonic()
            writer = self._send(json.dumps(header).encode() + b"\n", stdin)
            try:
                for kind, payload in self._frames(request_id, started + deadline_s):
                    sink = sinks.get(kind)
                    if sink is not None:
                        sink.write(payload)
                    elif kind == b"r":
                        return _result(json.loads(payload), cap, time.monotonic() - started)
            finally:
                if writer is not None:
                    writer.join(timeout=1.0)
        raise ChannelBroken("the exec server's answer ended early")  # pragma: no cover - _frames raises

    # -- the stream ----------------------------------------------------------------------------------

    def _send(self, header: bytes, body: bytes | None) -> threading.Thread | None:
        """Write the request; a large body goes from a thread, so the answer can be read meanwhile."""
        try:
            if not body or len(body) < _RECV_BYTES:
                self._raw.sendall(header + (body or b""))
                return None
            self._raw.sendall(header)
        except OSError as exc:
            self.close()
            raise ChannelBroken(f"cannot send to the exec server: {exc}") from exc

        def write() -> None:
            try:
                self._raw.sendall(body)
            except OSError:
                self.broken = True

        thread = threading.Thread(target=write, name="sandbox-channel-stdin", daemon=True)
        thread.start()
        return thread

    def _frames(self, request_id: int, deadline: float) -> Iterator[tuple[bytes, bytes]]:
        """The frames of one request (others are skipped) until the caller stops; raises at the deadline."""
        while True:
            while len(self._pending) >= FRAME.size:
                kind, frame_id, length = FRAME.unpack_from(self._pending)
                if len(self._pending) < FRAME.size + length:
                    break
                payload = bytes(self._pending[FRAME.size : FRAME.size + length])
                del self._pending[: FRAME.size + length]
                if frame_id == request_id:
                    yield kind, payload
            self._receive(deadline)

    def _receive(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([self._raw], [], [], remaining)[0]:
            self.broken = True
            raise ChannelTimeout("the sandbox's exec server did not answer in time")
        try:
            chunk = self._raw.recv(_RECV_BYTES)
        except OSError as exc:
            self.close()
            raise SandboxGone(f"the sandbox's stream broke: {exc}") from exc
        if not chunk:
            self.close()
            raise SandboxGone("the sandbox stopped (its exec server's stream ended)")
        if self._demux is None:
            self._pending += chunk
            return
        for stream, payload in self._demux.feed(chunk):
            if stream == 1:
                self._pending += payload


def _result(answer: dict[str, Any], cap: int | None, duration_s: float) -> ChannelResult:
    def capped(stream: str) -> BoundedOutput | None:
        if cap is None:
            return None
        part = answer[stream]
        head, tail = base64.b64decode(part["head"]), base64.b64decode(part["tail"])
        return BoundedOutput.from_parts(cap, head, tail, int(part["total"]))

    return ChannelResult(
        exit_code=int(answer["exit_code"]),
        timed_out=bool(answer["timed_out"]),
        oom_kills=int(answer["oom_kills"]),
        stdout=capped("stdout"),
        stderr=capped("stderr"),
        duration_s=duration_s,
        left_running=_count(answer.get("left_running")),  # a server of an older image sends neither
        memory_peak=_count(answer.get("memory_peak")),
    )


def _count(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
