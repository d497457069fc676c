"""A streams worker stalled past its session under load (a zombie) comes back and writes nothing for the
partitions that moved meanwhile (`streams.fencing`): the attack, on real Kafka.

Two workers with standby replicas, null rollout, sandbox and verifier answers (`tests.integration.null_run`),
40 episodes of 6 steps all in flight. One worker stops itself (SIGSTOP, every thread) in the middle of a
batch it has decided, at one of the two points a stall hurts most (`TRIALOG_STREAMS_FAULT`):

* `stop_before_check`: before the batch's membership check. Let go 8 s later (its session is 6 s), it must
  find its membership stale and give the batch back;
* `stop_after_check`: after the check passed, before its first send. Let go, it sends records stamped 8 s
  ago, which `episode.events` and the changelog must refuse (`message.timestamp.before.max.ms`).

Either way every episode must end and `trialog audit` must report lost 0, duplicate steps 0 and intact
chains (without the fence, both points gave duplicate steps and forked chains), and the stalled worker must
go on running.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType

from schemas.topics import EPISODE_COMMANDS, LATE_WRITE_MAX_MS, topic_name
from streams.app import FAULT_ENV
from streams.kafka import clients
from streams.kafka.topics import ensure_topics
from tests.integration.fault_helpers import audited_healthy, stop_processes
from tests.integration.null_run import publish_task, run_episodes, start_streams, tails

EPISODES, STEPS = 40, 6
RUN_TIMEOUT_S = 300
STALL_S = 8.0
STALL_AT_BATCH = 25  # of the stalled worker's batches that send: with the load well under way


def _recovered_partitions(log: Path) -> int:
    return log.read_text(errors="replace").count("recovered:") if log.exists() else 0


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("point", ["stop_before_check", "stop_after_check"])
def test_a_streams_worker_stalled_past_its_session_writes_nothing_for_moved_partitions(
    kafka_bootstrap: str, tmp_path: Path, point: str
) -> None:
    run = f"itfz{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    publish_task(kafka_bootstrap, run)
    stalled = start_streams(
        kafka_bootstrap, run, "s1", tmp_path, "--standby-replicas", "1",
        env={FAULT_ENV: f"{point}:{STALL_AT_BATCH}"},
    )  # fmt: skip
    workers = {
        "s1": stalled,
        "s2": start_streams(kafka_bootstrap, run, "s2", tmp_path, "--standby-replicas", "1"),
    }
    try:
        give_up = time.monotonic() + 120
        while True:  # both own partitions before the load starts
            recovered = [_recovered_partitions(tmp_path / f"{n}.log") for n in workers]
            if all(recovered) and sum(recovered) >= EPISODE_COMMANDS.partitions:
                break
            assert time.monotonic() < give_up, f"no assignment to both workers\n{tails(tmp_path)}"
            time.sleep(0.3)
        let_go: list[threading.Timer] = []

        def let_go_later(_answered: int, _ended: set[str]) -> None:
            if not let_go and _stopped(stalled.pid):
                # The answers keep coming meanwhile: the survivor takes the stalled worker's partitions.
                let_go.append(threading.Timer(STALL_S, stalled.send_signal, (signal.SIGCONT,)))
                let_go[0].start()

        ended = run_episodes(
            kafka_bootstrap, run, EPISODES, STEPS, RUN_TIMEOUT_S, tmp_path, on_progress=let_go_later
        )
        assert let_go, f"the worker never stalled at batch {STALL_AT_BATCH}\n{tails(tmp_path)}"
        assert len(ended) == EPISODES, tails(tmp_path)
        # The run may end before the stalled worker is let go: the audit must see what it does then.
        let_go[0].join()
        log = tmp_path / "s1.log"
        give_up = time.monotonic() + 60
        while "membership not confirmed" not in log.read_text(errors="replace"):
            assert time.monotonic() < give_up, f"the stalled worker never saw it was stale\n{tails(tmp_path)}"
            time.sleep(0.3)
        time.sleep(3)  # and whatever it would write next
        report = audited_healthy(run, kafka_bootstrap, timeout_s=180)
        assert report["started"] == EPISODES and report["completed"] == EPISODES, report
        assert all(process.poll() is None for process in workers.values()), tails(tmp_path)
        # The table's changelog refuses late rows as `episode.events` refuses late events.
        changelog = f"{topic_name(run, 'trialog-streams')}-episodes-changelog"
        admin = clients.admin(kafka_bootstrap)
        try:
            configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, changelog)])
        finally:
            admin.close()
        late = configs["topic"][changelog]["message.timestamp.before.max.ms"]["value"]
        assert late == str(LATE_WRITE_MAX_MS), configs
    finally:
        stalled.send_signal(signal.SIGCONT)
        stop_processes(workers.values(), grace_s=30)
