"""The exec server (a sandbox's PID 1) run as a plain local process, spoken to through ExecChannel.

Outside a sandbox it is not PID 1, so it never sweeps "every other process" on a timeout (that would be
the whole host); everything else behaves as in a sandbox.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sandbox_agent.docker_exec import ByteSink
from sandbox_agent.exec_channel import SERVER_SOURCE, ChannelTimeout, ExecChannel
from sandbox_agent.exec_server import Agent, Capped, agent_of
from sandbox_agent.output import BoundedOutput


@pytest.fixture
def channel() -> Iterator[ExecChannel]:
    ours, theirs = socket.socketpair()
    server = subprocess.Popen([sys.executable, "-I", "-S", "-c", SERVER_SOURCE], stdin=theirs, stdout=theirs)
    theirs.close()
    made = ExecChannel(ours, multiplexed=False)
    hello = made.hello(10.0)
    assert hello.hardened and not hello.isolated  # prctl took: not dumpable; not root: no uid to drop to
    yield made
    made.close()
    server.wait(timeout=10)


@dataclass(frozen=True)
class Ran:
    exit_code: int
    timed_out: bool
    stdout: BoundedOutput
    stderr: BoundedOutput


def run(
    channel: ExecChannel, script: str, *, timeout_s: float = 10.0, cap: int = 1000, stdin: bytes = b""
) -> Ran:
    argv = ["sh", "-c", script]
    answer = channel.run(argv, timeout_s=timeout_s, deadline_s=timeout_s + 5, cap=cap, stdin=stdin or None)
    assert answer.stdout is not None and answer.stderr is not None
    return Ran(answer.exit_code, answer.timed_out, answer.stdout, answer.stderr)


def test_commands_report_exit_code_and_both_streams(channel: ExecChannel) -> None:
    answer = run(channel, "echo out; echo err >&2; exit 3")
    assert answer.exit_code == 3 and not answer.timed_out
    assert answer.stdout is not None and answer.stderr is not None
    assert (answer.stdout.text(), answer.stderr.text()) == ("out\n", "err\n")


def test_stdin_reaches_the_command_and_requests_stay_in_step(channel: ExecChannel) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB: sent while the answer is being read
    answer = run(channel, "wc -c", stdin=big)
    assert answer.stdout is not None and answer.stdout.text().strip() == str(len(big))
    ignored = run(channel, "true", stdin=big)  # a command that never reads its input
    assert ignored.exit_code == 0
    assert run(channel, "echo next").stdout.text() == "next\n"


def test_a_timeout_kills_the_process_group(channel: ExecChannel) -> None:
    answer = run(channel, "sleep 30 & sleep 30", timeout_s=0.5)
    assert answer.timed_out and answer.exit_code == 137


def test_a_command_that_closes_its_streams_still_runs_to_its_end(channel: ExecChannel) -> None:
    answer = run(channel, "exec >/dev/null 2>&1; sleep 0.3; exit 5")
    assert answer.exit_code == 5 and not answer.timed_out


def test_background_jobs_holding_the_streams_do_not_hold_the_answer(channel: ExecChannel) -> None:
    answer = run(channel, "sleep 30 & echo started")
    assert answer.exit_code == 0 and not answer.timed_out  # killed with their group, not waited for


def test_commands_get_default_signal_handling(channel: ExecChannel) -> None:
    answer = run(channel, "yes | head -c 4")  # `yes` must die of SIGPIPE, not spin on EPIPE
    assert answer.stdout is not None and answer.stdout.text() == "y\ny\n"


def test_a_missing_program_is_127(channel: ExecChannel) -> None:
    answer = channel.run(["no-such-program-anywhere"], timeout_s=5, deadline_s=10, cap=1000)
    assert answer.exit_code == 127
    assert answer.stderr is not None and "no-such-program-anywhere" in answer.stderr.text()


def test_stream_mode_passes_everything_through(channel: ExecChannel) -> None:
    out, err = ByteSink(10**7), ByteSink(1000)
    answer = channel.run(
        ["sh", "-c", "head -c 3000000 /dev/zero; echo e >&2"],
        timeout_s=10,
        deadline_s=15,
        stdout=out,
        stderr=err,
    )
    assert answer.exit_code == 0 and bytes(out.data) == bytes(3_000_000) and bytes(err.data) == b"e\n"


def test_output_is_capped_by_the_server_as_the_host_would(channel: ExecChannel) -> None:
    answer = run(channel, "printf HEAD; head -c 100000 /dev/zero | tr '\\0' m; printf TAIL", cap=10)
    expected = BoundedOutput(10)
    expected.write(b"HEAD" + b"m" * 100_000 + b"TAIL")
    assert answer.stdout is not None and answer.stdout.text() == expected.text()
    assert answer.stdout.dropped == 100_008 - 10


def test_a_silent_server_is_a_timeout_for_the_host() -> None:
    ours, theirs = socket.socketpair()
    try:
        with pytest.raises(ChannelTimeout):
            ExecChannel(ours, multiplexed=False).hello(0.2)
    finally:
        ours.close()
        theirs.close()


def test_the_server_keeps_head_and_tail_like_bounded_output() -> None:
    for cap in (0, 1, 7, 64):
        kept, reference = Capped(cap), BoundedOutput(cap)
        for chunk in (b"abc", b"defghijklmnop" * 9, b"", b"xyz"):
            kept.write(chunk)
            reference.write(chunk)
        rebuilt = BoundedOutput.from_parts(cap, bytes(kept.head), bytes(kept.tail), kept.total)
        assert rebuilt.text() == reference.text()


def test_a_malformed_request_is_answered_and_the_server_keeps_serving(channel: ExecChannel) -> None:
    answer = channel.run([], timeout_s=5, deadline_s=10, cap=1000)
    assert answer.exit_code == 126 and answer.stderr is not None and "exec server" in answer.stderr.text()
    assert run(channel, "echo still here").stdout.text() == "still here\n"


def test_the_sweep_sees_the_processes_of_its_uid_and_no_others() -> None:
    assert os.getpid() in Agent(os.getuid(), os.getgid()).alive()
    unused = 1_999_999_999  # no process on a test machine runs as this uid
    assert Agent(unused, unused).alive() == []


def test_a_server_that_is_not_root_isolates_nothing() -> None:
    if os.getuid() == 0:  # the test machine may run as root: then only arguments naming root are refused
        assert agent_of(["0", "0"]) is None and agent_of([]) is None
    else:
        assert agent_of(["1000", "1000"]) is None
