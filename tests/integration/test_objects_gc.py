"""`trialog objects gc` against real Kafka: records with old and recent broker timestamps, a real store.

The broker is this test's own: `objects gc` reads every run on its broker, and the session's broker holds
every other test's runs by now (reading them took minutes of the suite and proved nothing more)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from kafka import KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType

from ops.cli.main import main as trialog
from ops.paths import Paths
from ops.process import wait_until
from ops.testing import KafkaContainer
from sandbox_agent.hosttree import read_tree
from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE, SnapshotId
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.testing import EpisodeScript
from schemas.topics import EPISODE_EVENTS
from streams.kafka import clients
from streams.kafka.topics import ensure_topics

DAY_S = 86400.0


def _old_snapshot(store: LocalObjectStore, root: Path, data: bytes) -> SnapshotId:
    root.mkdir()
    (root / "main.py").write_bytes(data)
    manifest, contents = read_tree(root)
    snapshot = SnapshotStore(store).save(manifest, contents)
    month_ago = time.time() - 30 * DAY_S
    os.utime(store.path_of(snapshot.sha256, MANIFEST_MEDIA_TYPE), (month_ago, month_ago))
    for entry in manifest.files:
        os.utime(store.path_of(entry.sha256), (month_ago, month_ago))
    return snapshot


def _stored(store: LocalObjectStore, snapshot: SnapshotId) -> bool:
    return store.path_of(snapshot.sha256, MANIFEST_MEDIA_TYPE).is_file()


def _accept_old_records(bootstrap: str, topic: str) -> None:
    """This test writes episodes dated weeks back, which `episode.events` refuses (records more than
    `LATE_WRITE_MAX_MS` old: the fence of `streams.fencing`); lift that for its own run's topic."""
    admin = clients.admin(bootstrap)
    try:
        century = str(100 * 365 * 86_400_000)
        change = ConfigResource(ConfigResourceType.TOPIC, topic, {"message.timestamp.before.max.ms": century})
        answer = admin.alter_configs([change], incremental=True)
        assert answer == {"topic": {topic: "OK"}}, answer

        def applied() -> bool:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            return bool(described["topic"][topic]["message.timestamp.before.max.ms"]["value"] == century)

        assert wait_until(applied, timeout_s=30), "the topic kept its timestamp bound"
    finally:
        admin.close()


@pytest.fixture
def kafka_bootstrap(docker_client: docker.DockerClient, stack_paths: Paths) -> Iterator[str]:
    container = KafkaContainer(stack_paths).start()
    yield container.bootstrap
    container.stop()


def test_old_episodes_blobs_go_and_recent_ones_stay(
    kafka_bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = f"gc{uuid.uuid4().hex[:6]}"
    ensure_topics(kafka_bootstrap, run)
    _accept_old_records(kafka_bootstrap, EPISODE_EVENTS.of(run))
    store = LocalObjectStore(tmp_path / "objects")
    old = _old_snapshot(store, tmp_path / "old", b"print('an episode of last month')\n")
    recent = _old_snapshot(store, tmp_path / "recent", b"print('an episode of yesterday')\n")
    codec = default_codec()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        for episode_id, snapshot, age_s in (("ep-old", old, 20 * DAY_S), ("ep-new", recent, DAY_S)):
            script = EpisodeScript(codec, episode_id=episode_id)
            script.start()
            script.execute(snapshot_id=str(snapshot))
            at_ms = int((time.time() - age_s) * 1000)
            for data in script.records:
                producer.send(EPISODE_EVENTS.of(run), key=episode_id.encode(), value=data, timestamp_ms=at_ms)
        producer.flush(timeout=30)
    finally:
        producer.close()

    argv = ["objects", "gc", "--objects", str(store.root), "--bootstrap", kafka_bootstrap, "--json"]
    assert trialog([*argv, "--timeout", "30"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert preview["applied"] is False and preview["deleted"] == 2 and _stored(store, old)

    assert trialog([*argv, "--timeout", "30", "--delete"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["applied"] is True and report["deleted"] == 2  # the old manifest and its one file
    assert not _stored(store, old)
    assert _stored(store, recent)
    assert SnapshotStore(store).load(recent).files[0].path == "main.py"
