from __future__ import annotations

import sys
import time
from pathlib import Path

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
