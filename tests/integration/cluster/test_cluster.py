"""The log beyond one broker, and workers started in any order:

* a cluster of three KRaft brokers (the one `trialog up --brokers 3` runs): a run's topics get three replicas
  and `min.insync.replicas=2`; a streams worker serves a run while one broker is killed mid-run and nothing
  is lost (every producer acks=all and idempotent);
* a streams worker started before `trialog run start` made the run's topics waits for them and serves
  within seconds of their making (aiokafka's default metadata refresh took 5 minutes), as one started after;
* SASL credentials from the environment reach every client, the streams worker's Faust app included.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError

from ops.paths import Paths
from ops.testing import KafkaCluster, KafkaContainer
from schemas.topics import EPISODE_EVENTS
from streams.kafka import clients
from streams.kafka.topics import ensure_topics
from tests.integration.fault_helpers import audited_healthy
from tests.integration.null_run import publish_task, run_episodes, start_streams, tails

# Generous bounds for a loaded 2-core machine: each tells a working path from a broken one (minutes).
RUN_TIMEOUT_S = 240.0
# The worker's metadata refresh is 5 s; the default that this replaces was 300 s.
SERVES_WITHIN_S = 90.0


@pytest.fixture
def cluster(docker_client: object, stack_paths: Paths) -> Iterator[KafkaCluster]:
    made = KafkaCluster(stack_paths, 3).start()
    try:
        yield made
    finally:
        made.stop()


def test_a_run_on_three_brokers_is_replicated_and_survives_losing_one(
    cluster: KafkaCluster, tmp_path: Path
) -> None:
    run = f"cl{uuid.uuid4().hex[:8]}"
    bootstrap = cluster.bootstrap
    ensure_topics(bootstrap, run)
    admin = clients.admin(bootstrap)
    try:
        (described,) = admin.describe_topics([EPISODE_EVENTS.of(run)])
        assert {len(p["replica_nodes"]) for p in described["partitions"]} == {3}, described
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, EPISODE_EVENTS.of(run))])
        assert configs["topic"][EPISODE_EVENTS.of(run)]["min.insync.replicas"]["value"] == "2", configs
    finally:
        admin.close()
    publish_task(bootstrap, run)
    worker = start_streams(bootstrap, run, "s1", tmp_path)
    killed: list[float] = []

    def kill_a_broker(answered: int, _ended: set[str]) -> None:
        if not killed and answered >= 60:
            cluster.nodes[1].kill()  # SIGKILL: a crash, not a shutdown
            killed.append(time.monotonic())

    try:
        ended = run_episodes(bootstrap, run, 30, 4, RUN_TIMEOUT_S, tmp_path, kill_a_broker)
        assert killed, "the run ended before the broker was killed"
        assert len(ended) == 30 and worker.poll() is None, tails(tmp_path)
        report = audited_healthy(run, bootstrap, timeout_s=180)
        assert report["started"] == 30 and report["completed"] == 30, report
        assert report["lost"] == 0 and report["duplicate_steps"] == 0, report
        # The killed broker comes back and rejoins the cluster.
        cluster.nodes[1].get_wrapped_container().start()
        deadline = time.monotonic() + 180
        while cluster.alive() < 3:
            assert time.monotonic() < deadline, "the killed broker did not rejoin"
            time.sleep(1)
    finally:
        worker.kill()
        worker.wait(timeout=30)


@pytest.mark.parametrize("order", ["worker-first", "topics-first"])
def test_a_streams_worker_serves_whichever_starts_first(
    order: str, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = f"so{uuid.uuid4().hex[:8]}"
    if order == "topics-first":
        ensure_topics(kafka_bootstrap, run)
    worker = start_streams(kafka_bootstrap, run, "s1", tmp_path)
    try:
        if order == "worker-first":
            log = tmp_path / "s1.log"
            deadline = time.monotonic() + 120
            while "waiting for the" not in (log.read_text(errors="replace") if log.exists() else ""):
                assert time.monotonic() < deadline and worker.poll() is None, tails(tmp_path)
                time.sleep(0.5)
            ensure_topics(kafka_bootstrap, run)  # what `trialog run start` does, after the worker
        made = time.monotonic()
        publish_task(kafka_bootstrap, run)
        ended = run_episodes(kafka_bootstrap, run, 4, 2, SERVES_WITHIN_S, tmp_path)
        assert len(ended) == 4, tails(tmp_path)
        print(f"\n{order}: 4 episodes ended {time.monotonic() - made:.1f} s after the topics were there")
    finally:
        worker.kill()
        worker.wait(timeout=30)


SASL_USERS = {"broker": "broker-secret", "trainer": "trainer-secret"}


@pytest.fixture
def sasl_kafka(docker_client: object, stack_paths: Paths, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A broker that accepts only SASL/PLAIN clients; this process's (and its children's) clients use the
    trainer's credentials from the environment."""
    for name, value in {
        "TRIALOG_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "TRIALOG_KAFKA_SASL_MECHANISM": "PLAIN",
        "TRIALOG_KAFKA_SASL_USERNAME": "trainer",
        "TRIALOG_KAFKA_SASL_PASSWORD": SASL_USERS["trainer"],
    }.items():
        monkeypatch.setenv(name, value)
    clients.security.cache_clear()
    container = KafkaContainer(stack_paths, sasl_plain_users=SASL_USERS).start()
    try:
        yield container.bootstrap
    finally:
        container.stop()
        monkeypatch.undo()
        clients.security.cache_clear()


def test_sasl_settings_reach_every_client_and_the_streams_worker(sasl_kafka: str, tmp_path: Path) -> None:
    run = f"sa{uuid.uuid4().hex[:8]}"
    ensure_topics(sasl_kafka, run)
    publish_task(sasl_kafka, run)
    worker = start_streams(sasl_kafka, run, "s1", tmp_path)
    try:
        ended = run_episodes(sasl_kafka, run, 4, 2, RUN_TIMEOUT_S, tmp_path)
        assert len(ended) == 4, tails(tmp_path)
    finally:
        worker.kill()
        worker.wait(timeout=30)
    # The same broker refuses a client without the right password.
    wrong = clients.Security("SASL_PLAINTEXT", "PLAIN", "trainer", "wrong")
    with pytest.raises(KafkaError):
        from kafka import KafkaAdminClient

        KafkaAdminClient(
            bootstrap_servers=sasl_kafka,
            request_timeout_ms=5000,
            bootstrap_timeout_ms=5000,
            **wrong.kafka_python(),
        ).list_topics()
