"""Background processes of the local stack: started detached, tracked by a pid file, stopped politely."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) still answers kill(0); read its state to tell.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def running_pid(pid_file: Path) -> int | None:
    pid = read_pid(pid_file)
    return pid if pid is not None and is_alive(pid) else None


def start_detached(
    argv: Sequence[str], *, pid_file: Path, log_file: Path, env: Mapping[str, str] | None = None
) -> int:
    """Start `argv` in its own session so it outlives the CLI, with output appended to `log_file`."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def stop(pid_file: Path, *, grace_s: float = 20.0) -> bool:
    """SIGTERM, wait up to `grace_s`, then SIGKILL. Returns whether a process was running."""
    pid = running_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not wait_until(lambda: not is_alive(pid), timeout_s=grace_s):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not is_alive(pid), timeout_s=5.0)
    pid_file.unlink(missing_ok=True)
    return True


def wait_until(predicate: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_CHOSEN_PORT = 10000  # well clear of the registered ports services take by default


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different ports nothing is bound to now, for a server about to start on them.

    Chosen below the kernel's ephemeral range where there is room: a port the kernel picks (bind to port 0)
    is one it also gives every outgoing connection, and a busy test session (Kafka clients, Docker, HTTP)
    took one such port between its choice and the server's bind (CI: the S3 server's volume port). Held
    bound until all are chosen, so that no two are the same."""
    low, _high = _ephemeral_range()
    held: list[socket.socket] = []
    try:
        for _ in range(count * 50):
            if len(held) == count:
                break
            port = random.randrange(LOWEST_CHOSEN_PORT, low) if low > LOWEST_CHOSEN_PORT + 1000 else 0
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((host, port))
            except OSError:
                sock.close()
                continue
            held.append(sock)
        if len(held) < count:
            raise OSError(f"no {count} free ports on {host} below {low}")
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


@contextlib.contextmanager
def closed_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port every connection to is refused while the block runs: bound here and never listened on, so no
    other program can listen there meanwhile (a `free_port` is only free when chosen: a server started
    after it, a concurrent test session's, may take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = EPHEMERAL_RANGE_FILE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def log_tail(log_file: Path, lines: int = 15) -> str:
    try:
        text = log_file.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
