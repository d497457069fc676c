"""The supervisor of `trialog worker learner --nproc N` (`ops.learner_group`): its decisions, and the
supervisor itself over ranks that are small Python scripts (the real learner's ranks are exercised by
tests/integration/learner/test_learner_ranks.py)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from ops import process
from ops.cli.main import build_parser
from ops.cli.workers.learner import backend_of, device_of
from ops.learner_group import (
    GroupEnd,
    Move,
    Place,
    next_move,
    place_of,
    rank_argv,
    rank_environment,
    supervise,
)

# A rank: records its start (`rank<R>-<group>-<pid>`), then acts out the scenario of argv[2]:
# - "fail:N" / "progress:N": in groups 1..N rank 1 exits 3 (with "progress", after rewriting the
#   checkpoint) while rank 0 waits to be killed; in later groups both exit 0;
# - "stop": rank 0 exits 0 on SIGTERM, and rank 1 once rank 0 has (as a learner's `Stop` releases it).
RANK = """
import os, signal, sys, time
from pathlib import Path
here, scenario = Path(sys.argv[1]), sys.argv[2]
rank = int(os.environ["RANK"])
assert os.environ["WORLD_SIZE"] == "2" and os.environ["MASTER_ADDR"] == "127.0.0.1"
group = len(list(here.glob(f"rank{rank}-*"))) + 1
def wait_for(pattern):
    while not list(here.glob(pattern)):
        time.sleep(0.05)
if scenario == "stop" and rank == 0:
    signal.signal(signal.SIGTERM, lambda *_: ((here / "stopped").touch(), sys.exit(0)))
(here / f"rank{rank}-{group}-{os.getpid()}").touch()
if scenario == "stop":
    wait_for("never" if rank == 0 else "stopped")
    sys.exit(0)
kind, failing = scenario.split(":")
if rank == 1:
    wait_for(f"rank0-{group}-*")  # rank 0 of this group is up (and recorded) before rank 1 acts
    if group <= int(failing):
        if kind == "progress":
            (here / "tmp").write_text(str(group))
            os.replace(here / "tmp", here / "learner.ckpt")
        sys.exit(3)
    (here / f"clean-{group}").touch()
    sys.exit(0)
wait_for(f"clean-{group}")
"""


def started(folder: Path, rank: int) -> list[int]:
    """The pids of `rank` in each group, in order."""
    found = sorted(folder.glob(f"rank{rank}-*"), key=lambda p: int(p.name.split("-")[1]))
    return [int(p.name.split("-")[2]) for p in found]


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ops.learner_group.RESTART_PAUSE_S", 0.0)  # restarts at once: a faster test


def run(folder: Path, scenario: str, max_restarts: int, stopping: threading.Event | None = None) -> int:
    argv = [sys.executable, "-c", RANK, str(folder), scenario]
    stopping = stopping or threading.Event()
    return supervise(argv, 2, folder / "learner.ckpt", stopping, max_restarts=max_restarts)


def test_a_failed_rank_takes_its_group_down_and_the_group_starts_again(tmp_path: Path) -> None:
    assert run(tmp_path, "fail:2", max_restarts=2) == 0
    first, second, _ = started(tmp_path, 0)
    assert len(started(tmp_path, 1)) == 3
    # rank 0 of the failed groups waited for a peer that had died: killed, not left behind
    assert not process.is_alive(first) and not process.is_alive(second)


def test_failures_in_a_row_without_a_new_checkpoint_give_up(tmp_path: Path) -> None:
    assert run(tmp_path, "fail:9", max_restarts=2) == 1
    assert len(started(tmp_path, 0)) == 3  # the first group and two restarts
    assert not any(process.is_alive(pid) for pid in started(tmp_path, 0))


def test_a_group_that_checkpointed_before_failing_starts_the_count_again(tmp_path: Path) -> None:
    assert run(tmp_path, "progress:3", max_restarts=1) == 0
    assert len(started(tmp_path, 0)) == 4


def test_a_stop_reaches_rank_0_which_releases_the_others(tmp_path: Path) -> None:
    stopping = threading.Event()

    def stop_when_running() -> None:
        process.wait_until(lambda: len(list(tmp_path.glob("rank*"))) == 2, timeout_s=120)
        stopping.set()

    threading.Thread(target=stop_when_running, daemon=True).start()
    assert run(tmp_path, "stop", max_restarts=0, stopping=stopping) == 0
    assert (tmp_path / "stopped").exists() and len(started(tmp_path, 0)) == 1


def test_next_move() -> None:
    failed, clean = (0, -9), (0, 0)
    assert next_move(GroupEnd(clean, stopping=False, progressed=False), 3, 3) == (Move.DONE, 3)
    assert next_move(GroupEnd(failed, stopping=True, progressed=False), 0, 0) == (Move.DONE, 0)
    assert next_move(GroupEnd(failed, stopping=False, progressed=False), 0, 1) == (Move.RESTART, 1)
    assert next_move(GroupEnd(failed, stopping=False, progressed=False), 1, 1) == (Move.GIVE_UP, 2)
    assert next_move(GroupEnd(failed, stopping=False, progressed=True), 5, 1) == (Move.RESTART, 1)
    assert next_move(GroupEnd(failed, stopping=False, progressed=True), 5, 0) == (Move.GIVE_UP, 1)


def test_a_rank_reads_its_place_as_torchrun_gives_it() -> None:
    env = rank_environment({"PATH": "/bin"}, 1, 2, 29500)
    assert env["PATH"] == "/bin" and env["MASTER_PORT"] == "29500"
    assert place_of(env) == Place(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert place_of({}) is None
    assert place_of({"WORLD_SIZE": "1", "RANK": "0"}) is None  # a group of one is the learner alone
    for broken in ({"WORLD_SIZE": "2", "RANK": "2"}, {"WORLD_SIZE": "two", "RANK": "0"},
                   {"WORLD_SIZE": "2", "RANK": "1"},  # no MASTER_ADDR / MASTER_PORT
                   {**env, "LOCAL_RANK": "2"}):  # fmt: skip
        with pytest.raises(ValueError):
            place_of(broken)


def test_the_ranks_run_the_supervisors_command_without_nproc() -> None:
    words = ["worker", "learner", "--run", "r", "--nproc", "2", "--nproc=3", "--lr", "1e-3"]
    rank = [sys.executable, "-m", "ops.cli", "worker", "learner", "--run", "r", "--lr", "1e-3"]
    assert rank_argv(words) == rank
    args = build_parser().parse_args(["worker", "learner", "--nproc", "4", "--backend", "gloo"])
    assert (args.nproc, args.backend, args.max_restarts) == (4, "gloo", 10)


def test_devices_and_backends_of_ranks() -> None:
    assert device_of("cuda", 3) == "cuda:3" and device_of("cuda:1", 3) == "cuda:1"
    assert device_of("cpu", 3) == "cpu" and device_of("cuda") == "cuda"
    assert backend_of("auto", "cuda:0") == "nccl" and backend_of("auto", "cpu") == "gloo"
    assert backend_of("gloo", "cuda:0") == "gloo"
