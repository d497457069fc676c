"""`trialog objects gc` against real Kafka: records with old and recent broker timestamps, a real store
(a folder, and a bucket of a real S3 server, SeaweedFS).

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
from ops.objects_gc import BucketBlobs, collect_garbage, kafka_source
from ops.paths import Paths
from ops.process import wait_until
from ops.stack.seaweedfs import SeaweedServer
from ops.testing import KafkaContainer
from sandbox_agent.hosttree import read_tree
from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE, SnapshotId
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import LocalObjectStore, ObjectStore
from schemas.codec import default_codec
from schemas.object_stores import StoreLocation, open_object_store
from schemas.s3_store import S3ObjectStore
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


def _accept_old_records(bootstrap: str, topic: str, *, future_too: bool = False) -> None:
    """This test writes episodes dated weeks back, which `episode.events` refuses (records more than
    `LATE_WRITE_MAX_MS` old: the fence of `streams.fencing`); lift that for its own run's topic (and the
    bound on records dated ahead of the broker's clock, for a clean-up run with a clock days ahead)."""
    admin = clients.admin(bootstrap)
    try:
        century = str(100 * 365 * 86_400_000)
        bounds = [
            "message.timestamp.before.max.ms",
            *(["message.timestamp.after.max.ms"] if future_too else []),
        ]
        change = ConfigResource(ConfigResourceType.TOPIC, topic, dict.fromkeys(bounds, century))
        answer = admin.alter_configs([change], incremental=True)
        assert answer == {"topic": {topic: "OK"}}, answer

        def applied() -> bool:
            described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            return all(described["topic"][topic][bound]["value"] == century for bound in bounds)

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


def _snapshot(store: ObjectStore, root: Path, data: bytes) -> SnapshotId:
    root.mkdir()
    (root / "main.py").write_bytes(data)
    manifest, contents = read_tree(root)
    return SnapshotStore(store).save(manifest, contents)


def _send_episode(
    producer: KafkaProducer, topic: str, episode_id: str, snapshot: SnapshotId, at_ms: int
) -> None:
    script = EpisodeScript(default_codec(), episode_id=episode_id)
    script.start()
    script.execute(snapshot_id=str(snapshot))
    for data in script.records:
        producer.send(topic, key=episode_id.encode(), value=data, timestamp_ms=at_ms)
    producer.flush(timeout=30)


def test_an_s3_stores_old_blobs_go_and_what_records_name_or_a_step_reuses_meanwhile_stays(
    kafka_bootstrap: str,
    seaweedfs_server: SeaweedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env = seaweedfs_server.env()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run = f"gcs3{uuid.uuid4().hex[:6]}"
    ensure_topics(kafka_bootstrap, run)
    topic = EPISODE_EVENTS.of(run)
    _accept_old_records(kafka_bootstrap, topic, future_too=True)
    prefix = f"gc/{uuid.uuid4().hex}"
    store = open_object_store(StoreLocation(bucket="trialog-test", prefix=prefix), env)
    assert isinstance(store, S3ObjectStore)
    old = _snapshot(store, tmp_path / "old", b"print('an episode of last month')\n")
    recent = _snapshot(store, tmp_path / "recent", b"print('an episode of yesterday')\n")
    reused = _snapshot(store, tmp_path / "reused", b"print('old, and a step takes it again now')\n")
    written_s = time.time()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    try:
        _send_episode(producer, topic, "ep-old", old, int((written_s - 20 * DAY_S) * 1000))
        _send_episode(producer, topic, "ep-new", recent, int((written_s - 3600) * 1000))

        # The command on the bucket: a preview (every object is minutes old, so young: nothing would go).
        argv = ["objects", "gc", "--objects", f"s3://trialog-test/{prefix}", "--bootstrap", kafka_bootstrap]
        assert trialog([*argv, "--json", "--timeout", "30"]) == 0
        preview = json.loads(capsys.readouterr().out)
        assert preview["objects"] == f"s3://trialog-test/{prefix}" and preview["applied"] is False
        # Three manifests and their three files: the recent episode's two named, the other four young.
        assert (preview["deleted"], preview["live"], preview["young"]) == (0, 2, 4)

        # Two days on (an S3 object's date cannot be set back): the old episode is past the 14-day window;
        # while the clean-up settles, a step reuses `reused` and its record lands.
        now_s = written_s + 2 * DAY_S
        names, read = kafka_source(kafka_bootstrap, timeout_s=30)

        def a_step_reuses_it(_seconds: float) -> None:
            _send_episode(producer, topic, "ep-now", reused, int(now_s * 1000) + 500)

        report = collect_garbage(
            names, read, store, BucketBlobs(store), window_s=14 * DAY_S, grace_s=DAY_S, settle_s=1.0,
            apply=True, now_s=lambda: now_s, sleep=a_step_reuses_it,
        )  # fmt: skip
    finally:
        producer.close()
    assert (report.deleted, report.reused, report.live) == (2, 2, 2), report
    assert not store.contains(old.sha256, MANIFEST_MEDIA_TYPE)
    for kept in (recent, reused):
        assert SnapshotStore(store).load(kept).files[0].path == "main.py"
    assert sorted(blob.name for blob in BucketBlobs(store).stored()) == sorted(
        [
            recent.sha256,
            reused.sha256,
            *(SnapshotStore(store).load(k).files[0].sha256 for k in (recent, reused)),
        ]
    )
