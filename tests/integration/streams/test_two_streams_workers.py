"""Two streams workers with standby replicas share a run under load; one is killed with SIGKILL mid-run.

Each worker has its own data directory and `--standby-replicas 1`. This test plays null rollout, sandbox
and verifier workers (`ops.bench.pipeline_workers`: every request answered at once) for 40 episodes of 6
steps, all in flight; once a third of the answers are given it kills one streams worker. Its partitions
move to the survivor (session timeout, rebalance, table recovery from the standby copy or the changelog,
then the worker's own recovery from `episode.events`). Every episode must end, and `trialog audit` must
report lost 0, duplicate steps 0 and intact chains. The recovery time (from the kill to the next request
of the slowest episode that was waiting) is printed.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

from schemas.topics import EPISODE_COMMANDS
from streams.kafka.topics import ensure_topics
from tests.integration.fault_helpers import audited_healthy, stop_processes
from tests.integration.null_run import publish_task, run_episodes, start_streams, tails

EPISODES, STEPS = 40, 6
RUN_TIMEOUT_S = 240


def _wait_for(what: str, check: object, timeout_s: float, logs: Path) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < give_up, f"no {what} within {timeout_s:g} s\n{tails(logs)}"
        time.sleep(0.3)


def _recovered_partitions(log: Path) -> int:
    return log.read_text(errors="replace").count("recovered:") if log.exists() else 0


def test_two_streams_workers_survive_a_kill_with_nothing_lost(kafka_bootstrap: str, tmp_path: Path) -> None:
    run = f"it2w{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    publish_task(kafka_bootstrap, run)
    workers = {
        name: start_streams(kafka_bootstrap, run, name, tmp_path, "--standby-replicas", "1")
        for name in ("s1", "s2")
    }
    try:
        # Both workers own partitions before the load starts (each logs a line per partition it recovers).
        def both_assigned() -> bool:
            recovered = [_recovered_partitions(tmp_path / f"{n}.log") for n in workers]
            return all(recovered) and sum(recovered) >= EPISODE_COMMANDS.partitions

        _wait_for("assignment to both workers", both_assigned, 120, tmp_path)
        killed_at: list[float] = []
        waiting_at_kill: set[str] = set()
        recovered_after: dict[str, float] = {}
        last_request: dict[str, float] = {}

        def note_request(episode: str) -> None:
            now = time.monotonic()
            last_request[episode] = now
            if killed_at and episode in waiting_at_kill:
                recovered_after.setdefault(episode, now - killed_at[0])

        def kill_one_third_in(answered: int, ended: set[str]) -> None:
            if killed_at or answered < EPISODES * (2 * STEPS + 2) // 3:
                return
            victim = workers["s1"]
            assert victim.poll() is None, tails(tmp_path)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
            killed_at.append(time.monotonic())
            waiting_at_kill.update(set(last_request) - ended)

        ended = run_episodes(
            kafka_bootstrap, run, EPISODES, STEPS, RUN_TIMEOUT_S, tmp_path,
            on_progress=kill_one_third_in, on_request=note_request,
        )  # fmt: skip
        assert len(ended) == EPISODES, tails(tmp_path)
        assert killed_at, "the load ended before the kill"
        assert workers["s2"].poll() is None, tails(tmp_path)
        slowest = max(recovered_after.values(), default=0.0)
        print(f"\nrecovery after kill -9: slowest waiting episode resumed {slowest:.1f} s after the kill "
              f"({len(recovered_after)} of {len(waiting_at_kill)} waiting episodes seen again)")  # fmt: skip
        (tmp_path / "recovery.json").write_text(json.dumps({"slowest_s": slowest}))
        report = audited_healthy(run, kafka_bootstrap, timeout_s=180)
        assert report["started"] == EPISODES and report["completed"] == EPISODES, report
    finally:
        stop_processes(workers.values(), grace_s=30)
