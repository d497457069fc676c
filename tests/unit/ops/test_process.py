from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from ops import process


def test_start_detached_then_stop(tmp_path: Path) -> None:
    pid_file, log_file = tmp_path / "p.pid", tmp_path / "p.log"
    code = "import signal, sys, time; print('ready', flush=True); time.sleep(60)"
    pid = process.start_detached([sys.executable, "-c", code], pid_file=pid_file, log_file=log_file)
    assert process.running_pid(pid_file) == pid
    assert process.wait_until(lambda: "ready" in log_file.read_text(), timeout_s=10)
    assert process.stop(pid_file, grace_s=5) is True
    assert not process.is_alive(pid)
    assert not pid_file.exists()
    assert process.stop(pid_file) is False


def test_stop_escalates_to_sigkill_when_term_is_ignored(tmp_path: Path) -> None:
    pid_file, log_file = tmp_path / "p.pid", tmp_path / "p.log"
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    pid = process.start_detached([sys.executable, "-c", code], pid_file=pid_file, log_file=log_file)
    assert process.wait_until(lambda: "ready" in log_file.read_text(), timeout_s=10)
    started = time.monotonic()
    assert process.stop(pid_file, grace_s=0.5) is True
    assert not process.is_alive(pid)
    assert time.monotonic() - started < 5


def test_stale_pid_file_is_not_running(tmp_path: Path) -> None:
    pid_file = tmp_path / "stale.pid"
    pid_file.write_text("999999999\n")
    assert process.running_pid(pid_file) is None


def test_free_port_is_free() -> None:
    assert not process.port_open(process.free_port())


def test_free_ports_are_different_and_below_the_ephemeral_range() -> None:
    low, _high = process._ephemeral_range()
    ports = process.free_ports(40)
    assert len(set(ports)) == 40
    assert all(process.LOWEST_CHOSEN_PORT <= port < low for port in ports)


def test_a_bound_port_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bound, not listening: a connection to it is refused, so only a bind tells that it is taken.
    with process.closed_port() as taken:
        (other,) = process.free_ports(1)
        picks = iter([taken, taken, other])
        monkeypatch.setattr(process.random, "randrange", lambda _low, _high: next(picks))
        assert process.free_ports(1) == [other]


def test_without_room_below_the_ephemeral_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process, "_ephemeral_range", lambda: (1024, 65535))
    (port,) = process.free_ports(1)
    assert port > 0 and not process.port_open(port)


def test_a_closed_port_refuses_connections_and_cannot_be_listened_on_while_held() -> None:
    with process.closed_port() as port:
        assert not process.port_open(port)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server, pytest.raises(OSError):
            server.bind(("127.0.0.1", port))  # another program's server cannot take it meanwhile
