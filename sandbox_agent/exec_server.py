"""PID 1 of every Docker sandbox: reaps orphans and runs trialog's commands, sent over the attach stream.

A `docker exec` costs tens of milliseconds (a runc process, namespaces joined, the engine's book-keeping);
a command sent to this server costs about one fork. The server is started as the container's command
(`python3 -I -S -c <this file> AGENT_UID AGENT_GID`), so it runs inside every quota of the sandbox.

Steps are isolated. The server runs as root holding only CAP_SETUID, CAP_SETGID (to start commands as the
agent), CAP_SETPCAP (to empty its capability bounding set at start, which commands inherit) and CAP_KILL,
under no-new-privileges; every command runs as AGENT_UID:AGENT_GID with no supplementary groups and no
capabilities at all (permitted, effective, inheritable, ambient and bounding sets empty). After every
command (and on a timeout) every process of the agent's uid is killed: a child that becomes the agent
calls kill(-1, SIGKILL), which the kernel delivers to every process that uid may signal, atomically with
respect to fork (a fork bomb cannot outrun it), and the sweep repeats until /proc shows none alive. So
nothing a step starts (setsid, nohup, double fork, disown) lives into the next step, writes into its
output, or races trialog's own listing and tar commands, which run as the agent's uid only while no agent
process exists.

The agent cannot reach the server: another uid, so no signal (EPERM), no ptrace, no /proc/1/fd, mem or
environ; non-dumpable as well; and no handler that stops it (SIGINT is default-handled, which for a
namespace's init means ignored from inside), so `kill -INT 1` cannot stop the sandbox and erase a grade. Its
one handler, for SIGUSR1 from the host, kills the agent's processes: what a fork bomb that holds every pid
leaves the host no `docker exec` to do.

What remains possible, and why: within one step the agent's processes can of course interfere with each
other (it is all the agent's own output); a process in a step can fill /tmp or the workspace for later
steps (that is state, snapshotted as the workspace is); the root-owned server still holds the four
capabilities above, which an exploit of the kernel or of this file would start from.

Run by hand or by a test (not root), the server runs commands as its own user and sweeps nothing but the
command's process group (elsewhere "every other process of the user" would be the caller's session).

Protocol. Requests, on stdin: a JSON line, then `stdin` bytes of input for the command. Answers, on
stdout: frames of (kind: 1 byte, request id: 8 bytes, length: 4 bytes, payload). Kinds: `h` hello (JSON:
hardened, isolated), `o`/`e` a chunk of stdout/stderr (mode "stream"), `r` the result (JSON: exit code,
timed out, OOM kills during the command, the agent's processes still alive when it ended (killed then;
null when not counted), the memory cgroup's high-water mark (null where unreadable), and in mode "cap"
each stream's head and tail in base64 and total size). Request fields: id, argv, timeout (s), stdin
(bytes that follow), mode ("cap" or "stream"), cap (bytes kept per stream in mode "cap"), env (added
variables). Only one client may be attached at a time: Docker copies the container's output to every
attached client, and one that does not read would stall it.

This file is standard library only and runs on the sandbox image's Python (3.11).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import errno
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any

FRAME = struct.Struct(">cQI")
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
LAST_CAP = 63  # higher than any kernel's; EINVAL past the kernel's last one ends the loop
SWEEPS = 200  # kill(-1) passes before giving up (one suffices unless a process is mid-exec of setuid)
KILLED = 128 + signal.SIGKILL
GRACE_AFTER_EXIT_S = 1.0  # how long streams held open by escaped processes are still read after the exit
IDLE_REAP_S = 0.5
SWEEP_SIGNAL = signal.SIGUSR1  # from the host: kill every process of the agent (see sweep_on_signal)
CHUNK = 65536


def harden() -> bool:
    """Non-dumpable: no ptrace and no /proc/1/fd for processes of the same user. True when it took."""
    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class Input:
    """Buffered reads of fd 0 that can also wait with a timeout (a BufferedReader cannot be selected)."""

    def __init__(self, fd: int = 0) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.closed = False

    def readable(self, timeout_s: float) -> bool:
        return bool(self.buffer) or bool(select.select([self.fd], [], [], timeout_s)[0])

    def _fill(self) -> None:
        data = os.read(self.fd, CHUNK)
        if not data:
            self.closed = True
            raise EOFError
        self.buffer += data

    def line(self) -> bytes:
        while b"\n" not in self.buffer:
            self._fill()
        end = self.buffer.index(b"\n") + 1
        line, self.buffer = bytes(self.buffer[:end]), self.buffer[end:]
        return line

    def chunk(self, most: int) -> bytes:
        if not self.buffer:
            self._fill()
        piece, self.buffer = bytes(self.buffer[:most]), self.buffer[most:]
        return piece


class Output:
    """Frames to stdout; only the main thread writes."""

    def __init__(self) -> None:
        self.stream = sys.stdout.buffer

    def send(self, kind: bytes, request_id: int, payload: bytes) -> None:
        self.stream.write(FRAME.pack(kind, request_id, len(payload)) + payload)
        self.stream.flush()


class Capped:
    """Head and tail of a stream, at most `cap` bytes in all (as the host's BoundedOutput keeps them)."""

    def __init__(self, cap: int) -> None:
        self.head_cap, self.tail_cap = cap - cap // 2, cap // 2
        self.head, self.tail, self.total = bytearray(), bytearray(), 0

    def write(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self.tail += data[-self.tail_cap :]
            del self.tail[: max(0, len(self.tail) - self.tail_cap)]

    def summary(self) -> dict[str, Any]:
        encode = base64.b64encode
        return {"head": encode(self.head).decode(), "tail": encode(self.tail).decode(), "total": self.total}


class Children:
    """Reaps every child (PID 1 inherits all orphans) and keeps the status of the one being waited for."""

    def __init__(self) -> None:
        self.statuses: dict[int, int] = {}
        self.watched: int | None = None

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.watched:
                self.statuses[pid] = status

    def exit_code(self, pid: int) -> int | None:
        status = self.statuses.pop(pid, None)
        return None if status is None else exit_code_of(status)


def exit_code_of(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def oom_kills() -> int:
    """The memory cgroup's OOM-kill counter (cgroup v1 or v2); 0 where neither can be read."""
    for path in ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"):
        try:
            with open(path) as counters:
                for line in counters:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except OSError:
            continue
    return 0


def memory_peak() -> int | None:
    """The memory cgroup's high-water mark in bytes since the sandbox started (cgroup v2's memory.peak,
    v1's memory.max_usage_in_bytes); None where neither can be read. The mount is read-only, so the mark
    cannot be reset per command: it covers the sandbox's life."""
    for path in ("/sys/fs/cgroup/memory.peak", "/sys/fs/cgroup/memory/memory.max_usage_in_bytes"):
        try:
            with open(path) as mark:
                return int(mark.read().strip())
        except (OSError, ValueError):
            continue
    return None


class Agent:
    """Who commands run as, when the server is root: a uid and gid other than the server's."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid

    def alive(self) -> list[int]:
        """The processes of the agent's uid alive (not zombies) in the sandbox."""
        found: list[int] = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/status", "rb") as status:
                    text = status.read(2048)
            except OSError:
                continue
            state = text.partition(b"State:\t")[2][:1]
            uids = text.partition(b"Uid:\t")[2].split(b"\n", 1)[0].split()
            if state not in (b"Z", b"X") and str(self.uid).encode() in uids[:4]:
                found.append(int(name))
        return found

    def kill_all(self, children: Children) -> bool:
        """SIGKILL every process of the agent's uid; True once none is left."""
        for _ in range(SWEEPS):
            children.reap()
            alive = self.alive()
            if not alive:
                return True
            try:
                pid = os.fork()
            except OSError:  # the pids quota is spent (a fork bomb): kill what was seen, then fork again
                for seen in alive:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(seen, signal.SIGKILL)
                continue
            if pid == 0:  # pragma: no cover - the child
                try:
                    os.setresuid(self.uid, self.uid, self.uid)  # no capabilities left: only the agent's
                    os.kill(-1, signal.SIGKILL)
                finally:
                    os._exit(0)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            time.sleep(0.001)
        children.reap()
        return not self.alive()


def kill_everything_else(children: Children) -> None:
    """SIGKILL every process but this one (what a timed-out step may have left, even outside its group)."""
    me = os.getpid()
    for _ in range(50):  # a fork bomb may still be forking: sweep until nothing is left
        others = [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me]
        alive = 0
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
                alive += 1
            except (ProcessLookupError, PermissionError):
                pass
        children.reap()
        if not alive:
            return
        time.sleep(0.01)


def pump_stdin(source: Input, length: int, target: int | None) -> None:
    """Copy `length` bytes of the request to the command's stdin; the rest is drained if it stops reading."""
    left = length
    while left > 0:
        try:
            piece = source.chunk(min(left, CHUNK))
        except EOFError:
            break
        left -= len(piece)
        if target is not None:
            try:
                os.write(target, piece)
            except OSError:  # the command closed its stdin or ended: keep the request stream in step
                os.close(target)
                target = None
    if target is not None:
        os.close(target)


# Python ignores SIGPIPE and SIGXFSZ; the command must get them as any program expects (SIGINT is default
# in the whole server, see main).
DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def spawn(request: dict[str, Any], agent: Agent | None) -> tuple[int, int | None, int, int]:
    """Start the command in a new session (its own process group); returns pid, stdin, stdout, stderr fds.
    The pipes are the server's (root's, when it is root): no other process can open them through /proc."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    if request["stdin"]:
        in_read, in_write = os.pipe()
    else:
        in_read, in_write = os.open(os.devnull, os.O_RDONLY), -1
    env = {**os.environ, **request.get("env", {})}
    try:
        argv = request["argv"]
        if agent is None:
            actions = [(os.POSIX_SPAWN_DUP2, in_read, 0), (os.POSIX_SPAWN_DUP2, out_write, 1)]
            actions.append((os.POSIX_SPAWN_DUP2, err_write, 2))
            pid = os.posix_spawnp(
                argv[0], argv, env, file_actions=actions, setsid=True, setsigdef=DEFAULT_SIGNALS
            )
        else:
            # Popen forks in C (no Python runs in the child): setsid, no groups, the agent's gid and uid,
            # which clears every capability. restore_signals gives SIGPIPE and SIGXFSZ their defaults.
            process = subprocess.Popen(
                argv, stdin=in_read, stdout=out_write, stderr=err_write, env=env, start_new_session=True,
                user=agent.uid, group=agent.gid, extra_groups=[], close_fds=True, restore_signals=True,
            )  # fmt: skip
            process.returncode = 0  # the server reaps every child itself: Popen must never wait for it
            pid = process.pid
    except BaseException:
        for fd in (in_read, in_write, out_read, out_write, err_read, err_write):
            if fd >= 0:
                os.close(fd)
        raise
    for fd in (in_read, out_write, err_write):
        os.close(fd)
    return pid, (in_write if in_write >= 0 else None), out_read, err_read


def run(
    request: dict[str, Any], source: Input, output: Output, children: Children, agent: Agent | None = None
) -> dict[str, Any]:
    deadline = time.monotonic() + float(request["timeout"])
    request_id = int(request["id"])
    streamed = request.get("mode") == "stream"
    caps = {b"o": Capped(int(request.get("cap", 0))), b"e": Capped(int(request.get("cap", 0)))}
    oom_before = oom_kills()
    try:
        pid, stdin_fd, out_fd, err_fd = spawn(request, agent)
    except OSError as exc:
        pump_stdin(source, int(request["stdin"]), None)
        message = f"{request['argv'][0]}: {exc.strerror}\n".encode()
        if streamed:
            output.send(b"e", request_id, message)
        else:
            caps[b"e"].write(message)
        return result(127 if isinstance(exc, FileNotFoundError) else 126, False, 0, caps)
    children.watched = pid
    feeder = threading.Thread(target=pump_stdin, args=(source, int(request["stdin"]), stdin_fd), daemon=True)
    feeder.start()
    open_fds = {out_fd: b"o", err_fd: b"e"}
    code: int | None = None
    left: int | None = None  # processes of the agent alive when the command ended (None: not counted)
    exited_at, pause = 0.0, 0.0002
    while True:
        now = time.monotonic()
        if code is None and now >= deadline:
            break
        if code is not None and (not open_fds or now >= exited_at + GRACE_AFTER_EXIT_S):
            break
        if open_fds:
            ready = select.select(list(open_fds), [], [], max(0.0, min(0.05, deadline - now)))[0]
        else:  # streams closed, command still running (or just exiting): poll, backing off
            ready, pause = [], min(pause * 2, 0.05)
            time.sleep(pause)
        for fd in ready:
            data = os.read(fd, CHUNK)
            if not data:
                os.close(fd)
                del open_fds[fd]
            elif streamed:
                output.send(open_fds[fd], request_id, data)
            else:
                caps[open_fds[fd]].write(data)
        if code is None:
            children.reap()
            code = children.exit_code(pid)
            if code is not None:  # the command ended: its background jobs end with it
                if agent is not None:  # what it left running (a grade's resource signal), then killed
                    left = len(agent.alive())
                kill_group(pid)
                if agent is not None:
                    agent.kill_all(children)  # and so does everything else it started
                exited_at = time.monotonic()
    for fd in open_fds:
        os.close(fd)
    timed_out = code is None
    if timed_out:
        if agent is not None:
            left = len(set(agent.alive()) - {pid})
        kill_group(pid)
        if agent is not None:
            agent.kill_all(children)
        wait_for(pid, children)
        if agent is None and os.getpid() == 1:  # as a sandbox's init without an agent uid (older images)
            kill_everything_else(children)
        code = KILLED
    feeder.join(timeout=5.0)
    children.watched = None
    assert code is not None
    return result(code, timed_out, oom_kills() - oom_before, caps, left, memory_peak())


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def wait_for(pid: int, children: Children) -> int:
    for _ in range(500):
        children.reap()
        code = children.exit_code(pid)
        if code is not None:
            return code
        time.sleep(0.01)
    return KILLED


def result(
    code: int,
    timed_out: bool,
    ooms: int,
    caps: dict[bytes, Capped],
    left: int | None = None,
    peak: int | None = None,
) -> dict[str, Any]:
    summaries = {"stdout": caps[b"o"].summary(), "stderr": caps[b"e"].summary()}
    counts = {"oom_kills": ooms, "left_running": left, "memory_peak": peak}
    return {"exit_code": code, "timed_out": timed_out, **counts, **summaries}


def serve(
    source: Input,
    output: Output,
    hardened: bool,
    agent: Agent | None = None,
    children: Children | None = None,
) -> None:
    children = children or Children()
    hello = {"hardened": hardened, "isolated": agent is not None}
    output.send(b"h", 0, json.dumps(hello).encode())
    while True:
        while not source.readable(IDLE_REAP_S):
            children.reap()
        try:
            request = json.loads(source.line())
        except EOFError:
            return
        except ValueError:
            continue  # not a request: nothing to answer
        try:
            answer = run(request, source, output, children, agent)
        except Exception as exc:  # a malformed request must never take PID 1, hence the sandbox, down
            failed = Capped(4096)
            failed.write(f"trialog exec server: {exc!r}\n".encode())
            answer = result(126, False, 0, {b"o": Capped(0), b"e": failed})
        output.send(b"r", int(request.get("id", 0)), json.dumps(answer).encode())
        children.reap()


def drop_bounding_set() -> bool:
    """Empty the server's capability bounding set (its own capabilities stay): commands inherit the empty
    set, so not even a file-capability binary could give them one. True when it took."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    for cap in range(LAST_CAP + 1):
        if prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            return ctypes.get_errno() == errno.EINVAL and cap > 0  # EINVAL: past the kernel's last one
    return True


def agent_of(args: list[str]) -> Agent | None:
    """The agent's uid and gid from the arguments, when the server is root and they name another user.
    None (the host then refuses the channel and uses `docker exec` as the agent) if isolation fails."""
    if len(args) != 2 or os.getuid() != 0:
        return None
    uid, gid = int(args[0]), int(args[1])
    if uid == 0 or gid == 0 or not drop_bounding_set():
        return None
    return Agent(uid, gid)


def sweep_on_signal(agent: Agent, children: Children) -> None:
    """On SWEEP_SIGNAL, kill every process of the agent's uid. The host sends it (`docker kill -s`) when its
    own sweep cannot start: a `docker exec` needs a pid, and a fork bomb may hold every one of the sandbox's.
    A signal needs none. The agent cannot send it (another uid: EPERM), and all it does is what the host
    does after every step anyway."""
    signal.signal(SWEEP_SIGNAL, lambda _signum, _frame: agent.kill_all(children))


def main() -> None:
    # Default-handled: a namespace's init ignores such signals from inside, and there is nothing to catch.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    hardened = harden()
    agent = agent_of(sys.argv[1:])
    children = Children()
    if agent is not None and os.getpid() == 1:
        sweep_on_signal(agent, children)
    source = Input()
    try:
        serve(source, Output(), hardened, agent, children)
    except Exception:  # whatever happens to the channel, PID 1 must stay (else the sandbox stops)
        if os.getpid() != 1:
            raise
    if os.getpid() != 1:  # run by hand or by a test: done when its input ends
        return
    # As a sandbox's init, stay up and keep reaping without a client, or the sandbox would stop.
    while True:
        children.reap()
        time.sleep(IDLE_REAP_S)


if __name__ == "__main__":
    main()
