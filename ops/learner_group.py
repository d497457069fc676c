"""`trialog worker learner --nproc N`: the learner's N ranks on this machine, supervised as one group.

The supervisor starts N copies of its own command line (without `--nproc`), each told its place the way
`torchrun` tells it (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: `learner.ranks` explains what
the ranks do). It trains nothing itself; it watches:

- when any rank dies (SIGKILL, an error, a collective broken by a dead peer), the others are killed at once
  (they could wait in a collective for a peer that never comes) and the whole group is started again on a
  new port: the new rank 0 resumes from the last checkpoint, which only versions every rank trained reach,
  so versions go on without a gap and nothing is trained twice;
- restarts in a row that produce no new checkpoint are counted, and past `max_restarts` the supervisor gives
  up (exit 1) rather than crash-looping: whoever runs it (a pod's restart policy) decides what comes next;
- SIGTERM or SIGINT stops the group cleanly: rank 0 is told (it finishes its step, checkpoints, releases
  the followers); a group still running after `grace_s` is killed.

The ranks run in their own session (a terminal's Ctrl-C reaches only the supervisor, which stops rank 0
first) and die with the supervisor (PR_SET_PDEATHSIG on Linux): no rank outlives it to hold a GPU or
write a checkpoint beside a new group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ops.console import say
from ops.paths import REPO_ROOT
from ops.process import free_port

MASTER_ADDR = "127.0.0.1"  # the ranks of one machine meet on loopback
STOP_GRACE_S = 120.0  # a clean stop finishes the step in hand (a long one on a big model) and checkpoints
POLL_S = 0.2
RESTART_PAUSE_S = 1.0
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Place:
    """A rank's place in its group, as the environment gives it."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int  # the ranks on this machine (they share its cores)


def place_of(env: Mapping[str, str]) -> Place | None:
    """The group this process is a rank of (torchrun's variables), or None when it runs alone."""
    if "WORLD_SIZE" not in env:
        return None
    try:
        world = int(env["WORLD_SIZE"])
        rank = int(env.get("RANK", ""))
        local = int(env.get("LOCAL_RANK", str(rank)))
        here = int(env.get("LOCAL_WORLD_SIZE", str(world)))
    except ValueError:
        raise ValueError("RANK, LOCAL_RANK and WORLD_SIZE must be whole numbers") from None
    if world < 1 or not 0 <= rank < world or not 0 <= local < here:
        raise ValueError(f"rank {rank} (local {local} of {here}) does not fit a group of {world}")
    if world > 1 and not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
        raise ValueError("a rank needs MASTER_ADDR and MASTER_PORT to find rank 0")
    return Place(rank, world, local, here) if world > 1 else None


def rank_environment(env: Mapping[str, str], rank: int, world_size: int, port: int) -> dict[str, str]:
    return {
        **env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": MASTER_ADDR, "MASTER_PORT": str(port),
    }  # fmt: skip


def rank_argv(words: Sequence[str]) -> list[str]:
    """What each rank runs: the supervisor's own `trialog` command words without `--nproc`."""
    out: list[str] = [sys.executable, "-m", "ops.cli"]
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--nproc":
            skip = True
        elif not word.startswith("--nproc="):
            out.append(word)
    return out


class Move(Enum):
    DONE = "done"  # the group stopped (asked to, or on its own with every rank at 0)
    RESTART = "restart"
    GIVE_UP = "give up"


@dataclass(frozen=True, slots=True)
class GroupEnd:
    """How one run of the group ended: each rank's exit code (negative: the signal that killed it), whether
    a stop was asked for, and whether the checkpoint changed while it ran."""

    codes: tuple[int, ...]
    stopping: bool
    progressed: bool

    @property
    def clean(self) -> bool:
        return all(code == 0 for code in self.codes)


def next_move(end: GroupEnd, failures: int, max_restarts: int) -> tuple[Move, int]:
    """What to do after the group ended, and the count of failures in a row without a new checkpoint."""
    if end.stopping or end.clean:
        return Move.DONE, failures
    failures = 1 if end.progressed else failures + 1
    return (Move.RESTART if failures <= max_restarts else Move.GIVE_UP), failures


def supervise(
    argv: Sequence[str],
    nproc: int,
    checkpoint: Path,
    stopping: threading.Event,
    *,
    max_restarts: int,
    grace_s: float = STOP_GRACE_S,
) -> int:
    """Run the group of `nproc` ranks of `argv` (`rank_argv`) until it stops; the exit code."""
    failures = 0
    started = 0
    while True:
        mark = _mark(checkpoint)
        port = free_port(MASTER_ADDR)
        started += 1
        ranks = [_start(argv, rank, nproc, port) for rank in range(nproc)]
        pids = ", ".join(f"rank {r} pid {p.pid}" for r, p in enumerate(ranks))
        say(f"learner group {started}: {nproc} ranks on {MASTER_ADDR}:{port} ({pids})")
        codes = _watch(ranks, stopping, grace_s)
        end = GroupEnd(codes, stopping.is_set(), _mark(checkpoint) != mark)
        move, failures = next_move(end, failures, max_restarts)
        described = ", ".join(f"rank {r} {_exit(code)}" for r, code in enumerate(codes))
        if move is Move.DONE:
            say(f"learner group stopped: {described}")
            return 0 if end.clean else 1
        if move is Move.GIVE_UP:
            say(f"learner group failed {failures} times in a row without a new checkpoint ({described}): "
                "giving up")  # fmt: skip
            return 1
        say(f"learner group failed ({described}): the other ranks were killed; restarting from the last "
            "checkpoint")  # fmt: skip
        if stopping.wait(RESTART_PAUSE_S):
            return 0


def _start(argv: Sequence[str], rank: int, nproc: int, port: int) -> subprocess.Popen[bytes]:
    env = rank_environment(os.environ, rank, nproc, port)
    return subprocess.Popen(
        list(argv), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=_die_with_parent(os.getpid()),
    )  # fmt: skip


def _die_with_parent(parent: int) -> Callable[[], None]:
    def arrange() -> None:
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the supervisor died before the line above: go now
            os.kill(os.getpid(), signal.SIGKILL)

    return arrange


def _watch(
    ranks: Sequence[subprocess.Popen[bytes]], stopping: threading.Event, grace_s: float
) -> tuple[int, ...]:
    """Wait for the group to end; a rank that fails ends it (the others are killed). Every rank's code."""
    told_at: float | None = None
    while True:
        codes = [p.poll() for p in ranks]
        if all(code is not None for code in codes):
            return tuple(code for code in codes if code is not None)
        if any(code not in (None, 0) for code in codes):
            return _kill(ranks)
        if stopping.is_set():
            if told_at is None:
                told_at = time.monotonic()
                with contextlib.suppress(ProcessLookupError):
                    ranks[0].send_signal(signal.SIGTERM)  # rank 0 stops the others when it has stopped
            elif time.monotonic() - told_at > grace_s:
                say(f"the learner group did not stop in {grace_s:.0f} s: killing it")
                return _kill(ranks)
        time.sleep(POLL_S)


def _kill(ranks: Sequence[subprocess.Popen[bytes]]) -> tuple[int, ...]:
    for process in ranks:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
    return tuple(process.wait() for process in ranks)


def _mark(checkpoint: Path) -> tuple[int, int] | None:
    """What changes when the checkpoint is rewritten (it is renamed into place: a new inode, a new time)."""
    try:
        stat = checkpoint.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def _exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"
