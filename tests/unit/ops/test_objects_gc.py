"""The object store's clean-up (`ops.objects_gc`): what is live, what is young, what goes."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from ops.cli.main import main as trialog
from ops.objects_gc import (
    MARK_SKEW_MS,
    BlobFolder,
    Marker,
    StoredBlob,
    collect_garbage,
    named_in,
    plan_sweep,
    run_topics,
)
from sandbox_agent.hosttree import read_tree
from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE, Manifest, SnapshotId
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import OCTET_STREAM, BlobRef, LocalObjectStore
from schemas.codec import default_codec
from schemas.common import Producer, RecordMeta
from schemas.publications import PolicyPublished
from schemas.testing import EpisodeScript

DAY_S = 86400.0
NOW_S = time.time()  # blobs written by the tests are "now" too
SHA = "ab" * 32


def test_references_are_found_at_any_depth_and_nothing_else_counts() -> None:
    record = {
        "meta": {"snapshot_id": f"snap-{SHA}-12", "detail": f"see snap-{SHA}-12 later"},
        "steps": [{"stdout": {"full": {"sha256": "cd" * 32, "size": 3, "media_type": "text/plain"}}}],
        "not_a_ref": {"sha256": "xyz", "size": 3, "media_type": "text/plain"},
        "partial": {"sha256": "ef" * 32},
    }
    found = list(named_in(record))
    assert found == [SnapshotId(SHA, 12), BlobRef("cd" * 32, 3, "text/plain")]


def test_the_window_and_the_always_live_topics() -> None:
    marker = Marker(window_start_ms=1_000)
    old, recent = 500, 2_000
    marker.add("episode.events", "r", old, {"s": f"snap-{'01' * 32}-1"})  # past the window
    marker.add("episode.events", "r", recent, {"s": f"snap-{'02' * 32}-1"})
    marker.add("tasks", "r", old, {"b": {"sha256": "03" * 32, "size": 1, "media_type": "x"}})
    for at, sha in ((100, "04"), (200, "05")):  # both old: only the newest weights stay
        marker.add("policy.versions", "r", at, {"w": {"sha256": sha * 32, "size": 1, "media_type": "x"}})
    marker.add("policy.versions", "other", 50, {"w": {"sha256": "06" * 32, "size": 1, "media_type": "x"}})
    assert marker.snapshots == {SnapshotId("02" * 32, 1)}

    class NoManifests(SnapshotStore):
        def __init__(self) -> None:
            pass

        def load(self, snapshot_id: SnapshotId) -> Manifest:
            raise ValueError("gone")

    live, broken = marker.live(NoManifests())
    assert live == {"02" * 32, "03" * 32, "05" * 32, "06" * 32}
    assert broken == [f"snap-{'02' * 32}-1"]


def _blob(name: str, age_s: float) -> StoredBlob:
    return StoredBlob(name, name, 10, NOW_S - age_s)


def test_the_sweep_keeps_named_and_young_blobs_and_old_temporaries_go() -> None:
    stored = [
        _blob("a" * 64, 10 * DAY_S),  # named
        _blob("b" * 64, 10 * DAY_S),  # unnamed, old
        _blob("c" * 64, 60.0),  # unnamed, young
        _blob(".tmp-x-1-2", 10 * DAY_S),  # a killed writer's leftover
        _blob(".tmp-y-1-2", 60.0),  # a writer at work
    ]
    plan = plan_sweep(stored, {"a" * 64, ".tmp-x-1-2"}, NOW_S, grace_s=DAY_S)
    assert [blob.name for blob in plan.delete] == [".tmp-x-1-2", "b" * 64]
    assert (plan.live, plan.young, plan.bytes_freed) == (1, 2, 20)


def test_topics_of_every_run_are_recognised_and_others_ignored() -> None:
    names = ["episode.events", "r1.episode.events", "r1.tasks", "x.y.policy.versions", "__consumer_offsets"]
    assert run_topics(names) == [
        ("episode.events", "", "episode.events"),
        ("r1.episode.events", "r1", "episode.events"),
        ("r1.tasks", "r1", "tasks"),
        ("x.y.policy.versions", "x.y", "policy.versions"),
    ]


def test_a_blob_put_again_or_asked_for_counts_as_just_written(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    ref = store.put(b"old bytes")
    path = tmp_path / ref.sha256[:2] / ref.sha256
    os.utime(path, (NOW_S - 30 * DAY_S, NOW_S - 30 * DAY_S))
    store.put(b"old bytes")
    assert path.stat().st_mtime > time.time() - DAY_S
    os.utime(path, (NOW_S - 30 * DAY_S, NOW_S - 30 * DAY_S))
    assert store.contains(ref.sha256)
    assert path.stat().st_mtime > time.time() - DAY_S
    assert not store.contains("0" * 64)


def test_the_folder_lists_only_the_stores_own_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    ref = store.put(b"x")
    (tmp_path / "README").write_text("not ours")
    (tmp_path / ref.sha256[:2] / ("9" * 64)).write_text("wrong fan-out folder")
    (tmp_path / "zz").mkdir()
    typed = store.put(b"y", "text/plain")
    assert [blob.name for blob in BlobFolder(tmp_path).stored()] == [ref.sha256, typed.sha256]
    assert [blob.location for blob in BlobFolder(tmp_path).stored()][1] == str(
        store.path_of(typed.sha256, "text/plain")
    )


class _Log:
    """Records by topic, as a `RecordSource` reads them (timestamps in ms)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, int, bytes | None]] = []
        self.reads: list[tuple[tuple[str, ...], int | None]] = []

    def read(self, topics: Sequence[str], since_ms: int | None) -> Iterator[tuple[str, int, bytes | None]]:
        self.reads.append((tuple(topics), since_ms))
        for topic, at, value in self.records:
            if topic in topics and (since_ms is None or at >= since_ms):
                yield topic, at, value


def _stored(store: LocalObjectStore, sha256: str, media_type: str = OCTET_STREAM) -> bool:
    """Whether a blob is there, without touching it as `contains` does."""
    return store.path_of(sha256, media_type).is_file()


def _age(store: LocalObjectStore, sha256: str, age_s: float, media_type: str = OCTET_STREAM) -> None:
    os.utime(store.path_of(sha256, media_type), (NOW_S - age_s, NOW_S - age_s))


def _old_tree(store: LocalObjectStore, root: Path, files: dict[str, bytes]) -> SnapshotId:
    root.mkdir()
    for name, data in files.items():
        (root / name).write_bytes(data)
    manifest, contents = read_tree(root)
    snapshot = SnapshotStore(store).save(manifest, contents)
    _age(store, snapshot.sha256, 30 * DAY_S, MANIFEST_MEDIA_TYPE)
    for entry in manifest.files:
        _age(store, entry.sha256, 30 * DAY_S)
    return snapshot


def test_collect_garbage_deletes_only_what_nothing_live_names(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    codec = default_codec()
    kept = _old_tree(store, tmp_path / "kept", {"a.py": b"kept by a recent step", "b.py": b"shared"})
    gone = _old_tree(store, tmp_path / "gone", {"c.py": b"only an old step named this", "b.py": b"shared"})
    weights = store.put(b"weights v1")
    _age(store, weights.sha256, 30 * DAY_S)
    stray = store.put(b"a blob nobody names")
    _age(store, stray.sha256, 30 * DAY_S)
    fresh = store.put(b"a snapshot file whose step is not logged yet")

    log = _Log()
    old_ms, recent_ms = int((NOW_S - 20 * DAY_S) * 1000), int((NOW_S - DAY_S) * 1000)
    episode = EpisodeScript(codec)
    episode.start()
    episode.execute(snapshot_id=str(gone))
    log.records += [("r1.episode.events", old_ms, data) for data in episode.records]
    recent = EpisodeScript(codec, episode_id="ep-0002")
    recent.start()
    recent.execute(snapshot_id=str(kept))
    log.records += [("r1.episode.events", recent_ms, data) for data in recent.records]
    meta = RecordMeta("ev-w1", 1, Producer("learner", "learner-0"))
    published = PolicyPublished(meta, "r1", 1, 0, f"sha256:{weights.sha256}", weights, 4)
    log.records.append(("r1.policy.versions", old_ms, codec.encode(published)))
    log.records.append(("r1.episode.events", recent_ms, b"not avro"))
    log.records.append(("r1.tasks", old_ms, None))  # a tombstone

    slept: list[float] = []

    def collect(apply: bool) -> dict[str, object]:
        report = collect_garbage(
            ["r1.episode.events", "r1.policy.versions", "r1.tasks", "other"], log.read, store,
            BlobFolder(store.root), window_s=14 * DAY_S, grace_s=DAY_S, settle_s=5.0, apply=apply,
            now_s=lambda: NOW_S, sleep=slept.append,
        )  # fmt: skip
        return report.to_json()

    preview = collect(apply=False)
    assert (preview["applied"], preview["deleted"], preview["undecodable"]) == (False, 3, 1)
    assert _stored(store, gone.sha256, MANIFEST_MEDIA_TYPE)  # a preview deletes nothing
    assert log.reads[0] == (("r1.policy.versions", "r1.tasks"), None)  # the always-live ones from the start
    assert log.reads[1] == (("r1.episode.events",), int((NOW_S - 14 * DAY_S) * 1000))

    assert slept == []  # a preview does not wait
    report = collect(apply=True)
    assert slept == [5.0] and log.reads[-1] == (
        ("r1.episode.events", "r1.policy.versions", "r1.tasks"),
        int(NOW_S * 1000) - MARK_SKEW_MS,
    )  # after the wait, every topic again from when the mark began
    assert report["deleted"] == 3 and report["broken_snapshots"] == [] and report["reused"] == 0
    assert report["young"] == 1 and report["live"] == 4  # kept: its manifest and 2 files; the weights
    kept_files = {e.sha256 for e in SnapshotStore(store).load(kept).files}
    assert _stored(store, kept.sha256, MANIFEST_MEDIA_TYPE)
    assert all(_stored(store, sha) for sha in [*kept_files, weights.sha256, fresh.sha256])
    assert not _stored(store, gone.sha256, MANIFEST_MEDIA_TYPE) and not _stored(store, stray.sha256)
    assert not _stored(store, BlobRef.of(b"only an old step named this").sha256)


def test_an_old_blob_a_snapshot_reuses_while_the_clean_up_waits_is_kept(tmp_path: Path) -> None:
    # The S3 store cannot refresh a reused object's date, and the folder's refresh can come after the
    # listing: what a record written during the clean-up names stays, whatever its date.
    store = LocalObjectStore(tmp_path / "objects")
    codec = default_codec()
    old = _old_tree(store, tmp_path / "old", {"main.py": b"print('reused by a step right now')"})
    other = _old_tree(store, tmp_path / "other", {"x.py": b"named by nothing"})
    log = _Log()

    def a_step_reuses_it(_seconds: float) -> None:
        episode = EpisodeScript(codec, episode_id="ep-now")
        episode.start()
        episode.execute(snapshot_id=str(old))
        log.records.extend(("r1.episode.events", int(NOW_S * 1000) + 500, data) for data in episode.records)

    report = collect_garbage(
        ["r1.episode.events"], log.read, store, BlobFolder(store.root), window_s=14 * DAY_S, grace_s=DAY_S,
        settle_s=1.0, apply=True, now_s=lambda: NOW_S, sleep=a_step_reuses_it,
    )  # fmt: skip
    assert (report.deleted, report.reused) == (2, 2)  # the other tree went; the reused manifest and file stay
    assert SnapshotStore(store).load(old).files[0].path == "main.py"
    assert not _stored(store, other.sha256, MANIFEST_MEDIA_TYPE)


def test_the_command_refuses_a_missing_store_before_touching_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = trialog(["objects", "gc", "--objects", str(tmp_path / "nowhere"), "--bootstrap", "127.0.0.1:1"])
    assert code == 2
    assert "no object store at" in capsys.readouterr().err
