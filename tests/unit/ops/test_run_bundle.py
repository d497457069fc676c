"""Run bundles (`ops.run_bundle`): topic files keep every record exactly, the bundle holds what the log names,
the manifest catches a changed file, and the audit, replay and reproduce commands read a bundle instead of
Kafka."""

from __future__ import annotations

import json
from pathlib import Path

import fastavro
import pytest

from ops.audit import EVENTS, LogRecord, audit
from ops.cli.main import main as trialog
from ops.run_bundle import (
    MANIFEST,
    Bundle,
    BundleError,
    ImageRecipe,
    from_time,
    read_topic,
    topic_file,
    write_bundle,
    write_topic,
)
from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE, Entry, Manifest
from sandbox_agent.snapshots import SnapshotStore
from schemas.blobs import BlobRef, LocalObjectStore
from schemas.common import Producer, RecordMeta
from schemas.publications import TaskPublished
from schemas.topics import TASKS, TOPICS
from tests.unit.ops.test_audit import CODEC, RunLog, healthy_run

BUNDLE_MEDIA_TYPE = "application/vnd.trialog.task-bundle+tar"


def test_a_topic_file_keeps_every_record_exactly(tmp_path: Path) -> None:
    records = [
        LogRecord("episode.events", 3, 2**40, b"ep-1", b"\xc3\x01" + bytes(range(256)), 1_700_000_000_123),
        LogRecord("episode.events", 0, 0, None, b"no key", 5, (("traceparent", b"00-ab-cd-01"), ("x", None))),
        LogRecord("episode.events", 7, 12, b"ep-2", None, 0),  # a compaction tombstone
        LogRecord("episode.events", 1, 1, b"", b"", 0, (("", b""),)),
    ]
    path = tmp_path / "t.avro"
    assert write_topic(path, "r1", "episode.events", iter(records)) == len(records)
    assert list(read_topic(path, "episode.events")) == records
    with path.open("rb") as file:  # a standard Avro container: any Avro reader opens it
        reader = fastavro.reader(file)
        assert reader.metadata["trialog.run"] == "r1" and reader.metadata["avro.codec"] == "deflate"
        assert [row["offset"] for row in reader] == [2**40, 0, 12, 1]


def test_reading_from_a_time_starts_each_partition_at_its_first_record_at_or_after_it() -> None:
    records = [
        LogRecord("t", 0, 0, None, b"", 10),
        LogRecord("t", 1, 0, None, b"", 30),
        LogRecord("t", 0, 1, None, b"", 25),
        LogRecord("t", 1, 1, None, b"", 15),  # after the partition's first at-or-after: kept
        LogRecord("t", 0, 2, None, b"", 20),
    ]
    assert [(r.partition, r.offset) for r in from_time(records, 20)] == [(1, 0), (0, 1), (1, 1), (0, 2)]


def _snapshot(store: LocalObjectStore, content: bytes) -> str:
    entry = Entry.file("a.py", 0o644, BlobRef.of(content).sha256, len(content))
    return str(SnapshotStore(store).save(Manifest.of([entry]), {entry.sha256: content}))


def _run_with_a_task(source: LocalObjectStore, *, missing: bool = False) -> tuple[RunLog, dict[str, bytes]]:
    """A healthy two-episode log, plus a published task whose bundle and initial snapshot are in `source`
    (the bundle only named, never stored, when `missing`)."""
    log = healthy_run(2)
    blobs = {"bundle": b"a task bundle", "initial": b"def add(a, b):\n    return a - b\n"}
    bundle = BlobRef.of(blobs["bundle"], BUNDLE_MEDIA_TYPE)
    if not missing:
        source.put(blobs["bundle"], BUNDLE_MEDIA_TYPE)
    initial = _snapshot(source, blobs["initial"])
    meta = RecordMeta("pub-1", 1, Producer("tasks", "t"))
    task = TaskPublished(
        meta, "task-1", "v1", "Fix it.", "trialog-sandbox:abc", 30.0, "pytest", None, (), bundle,
        initial_snapshot_id=initial,
    )  # fmt: skip
    log.add(TASKS.name, CODEC.encode(task), "task-1")
    return log, blobs


def _by_topic(log: RunLog) -> dict[str, list[LogRecord]]:
    """Every topic of the catalogue (as `trialog bundle` reads them), most of them empty here."""
    topics: dict[str, list[LogRecord]] = {topic.name: [] for topic in TOPICS}
    for record in log.records:
        topics[record.topic].append(record)
    return topics


def _write(tmp_path: Path, log: RunLog, source: LocalObjectStore, **options: object) -> Path:
    out = tmp_path / "bundle"
    recipe = ImageRecipe("trialog-sandbox", "abc", {"Dockerfile": b"FROM base\n"}, "sha256:1234")
    write_bundle("r1", _by_topic(log), source, out, images=[recipe], lock=b"fastavro==1\n", **options)  # type: ignore[arg-type]
    return out


def test_a_bundle_holds_the_records_and_every_blob_they_name(tmp_path: Path) -> None:
    source = LocalObjectStore(tmp_path / "objects")
    log, blobs = _run_with_a_task(source)
    out = _write(tmp_path, log, source)
    bundle = Bundle.open(out)
    assert bundle.run == "r1" and not bundle.hashes_only and bundle.verify() == []
    assert bundle.topics == {base: len(records) for base, records in _by_topic(log).items()}
    # Read back, the audit sees the same log.
    read = list(bundle.records(tuple(_by_topic(log))))
    assert sorted(read, key=lambda r: r.where) == sorted(log.records, key=lambda r: r.where)
    audited = [r for r in read if r.topic != TASKS.name]
    assert audit(audited).to_json() == audit([r for r in log.records if r.topic != TASKS.name]).to_json()
    # The task's bundle (typed), the initial snapshot's manifest and its file, copied into objects/.
    objects = bundle.objects
    assert objects.get(BlobRef.of(blobs["bundle"], BUNDLE_MEDIA_TYPE)) == blobs["bundle"]
    assert objects.get(BlobRef.of(blobs["initial"])) == blobs["initial"]
    kinds = sorted(entry["media_type"] for entry in bundle.manifest["blobs"])
    assert kinds == sorted(["application/octet-stream", BUNDLE_MEDIA_TYPE, MANIFEST_MEDIA_TYPE])
    assert all(entry["copied"] for entry in bundle.manifest["blobs"])
    (task,) = bundle.manifest["tasks"]
    assert task["task_id"] == "task-1" and task["initial_snapshot_id"].startswith("snap-")
    assert "trialog-sandbox:abc" in bundle.manifest["images"]["named_by_log"]
    (recipe,) = bundle.manifest["images"]["recipes"]
    assert recipe["image_id"] == "sha256:1234" and recipe["named_by_log"] is True
    without = bundle.manifest["images"]["without_recipe"]  # the made-up images of the scripted log
    assert "img" in without and "trialog-sandbox:abc" not in without
    assert (out / recipe["files"][0]).read_bytes() == b"FROM base\n"
    assert bundle.manifest["reward"]["outcome"]["pass"] == 1.0 and bundle.manifest["pinned"] == []


def test_a_blob_missing_from_the_store_is_listed_as_missing(tmp_path: Path) -> None:
    source = LocalObjectStore(tmp_path / "objects")
    log, blobs = _run_with_a_task(source, missing=True)
    out = tmp_path / "bundle"
    summary = write_bundle("r1", _by_topic(log), source, out)
    assert [ref.sha256 for ref in summary.missing] == [BlobRef.of(blobs["bundle"]).sha256]
    (entry,) = [e for e in Bundle.open(out).manifest["blobs"] if e.get("missing")]
    assert entry["media_type"] == BUNDLE_MEDIA_TYPE and entry["copied"] is False


def test_hashes_only_lists_the_blobs_and_copies_none(tmp_path: Path) -> None:
    source = LocalObjectStore(tmp_path / "objects")
    log, _ = _run_with_a_task(source)
    out = _write(tmp_path, log, source, blobs="hashes")
    bundle = Bundle.open(out)
    assert bundle.hashes_only and len(bundle.absent_blobs) == 3 and bundle.copied_blobs == []
    assert not (out / "objects").exists() or not any((out / "objects").rglob("*"))


@pytest.mark.parametrize("damage", ["flip", "remove", "blob"])
def test_a_changed_file_is_refused_when_the_bundle_is_opened(tmp_path: Path, damage: str) -> None:
    source = LocalObjectStore(tmp_path / "objects")
    log, blobs = _run_with_a_task(source)
    out = _write(tmp_path, log, source)
    events = out / topic_file(EVENTS)
    if damage == "flip":
        data = bytearray(events.read_bytes())
        data[len(data) // 2] ^= 0x01
        events.write_bytes(bytes(data))
        expected = "does not match the bundle's manifest"
    elif damage == "remove":
        events.unlink()
        expected = "listed in the bundle's manifest but missing"
    else:
        LocalObjectStore(out / "objects").path_of(BlobRef.of(blobs["initial"]).sha256).write_bytes(b"x")
        expected = "listed as copied"
    with pytest.raises(BundleError, match=expected):
        Bundle.open(out)


def test_a_bundle_is_written_only_into_an_empty_folder_and_read_only_whole(tmp_path: Path) -> None:
    source = LocalObjectStore(tmp_path / "objects")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(BundleError, match="not empty"):
        write_bundle("r1", {}, source, tmp_path / "full")
    with pytest.raises(BundleError, match=r"no manifest\.json"):
        Bundle.open(tmp_path / "full")
    out = _write(tmp_path, healthy_run(1), source)
    manifest = json.loads((out / MANIFEST).read_text())
    (out / MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(BundleError, match="format version 99"):
        Bundle.open(out)


def _bundle(tmp_path: Path, **options: object) -> tuple[Path, RunLog]:
    source = LocalObjectStore(tmp_path / "objects")
    log, _ = _run_with_a_task(source)
    return _write(tmp_path, log, source, **options), log


def test_audit_and_replay_read_a_bundle_without_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, log = _bundle(tmp_path)
    # A broker address where nothing listens: the bundle alone is read.
    nowhere = ["--bootstrap", "127.0.0.1:9"]
    assert trialog(["audit", "--bundle", str(out), "--json", *nowhere]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["run"] == "r1" and report["healthy"] and report["completed"] == 2
    assert report["records"] == sum(1 for r in log.records if r.topic != TASKS.name)
    assert trialog(["replay", "--bundle", str(out), "--json", *nowhere]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert [e["episode_id"] for e in replayed["episodes"]] == ["ep-0", "ep-1"]
    assert trialog(["audit", "other", "--bundle", str(out)]) == 2
    assert "holds run 'r1', not 'other'" in capsys.readouterr().err


def test_a_recheck_of_a_hashes_only_bundle_says_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = _bundle(tmp_path, blobs="hashes")
    assert trialog(["audit", "--bundle", str(out), "--recheck", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert "only the hashes of the run's 3 blobs" in error["error"] and "--objects LOCATION" in error["hint"]
    assert trialog(["reproduce", "ep-0", "--bundle", str(out)]) == 2
    assert "written with --hashes-only" in capsys.readouterr().err


def test_a_damaged_bundle_is_a_clear_error_for_every_reader(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = _bundle(tmp_path)
    (out / topic_file(EVENTS)).write_bytes(b"not avro")
    for argv in (["audit", "--bundle", str(out)], ["reproduce", "ep-0", "--bundle", str(out)]):
        assert trialog(argv) == 2
        err = capsys.readouterr().err
        assert "does not match the bundle's manifest" in err and "bundle the run again" in err


def test_audit_needs_a_run_or_a_bundle(capsys: pytest.CaptureFixture[str]) -> None:
    assert trialog(["audit"]) == 2
    assert "name the RUN to audit, or a bundle with --bundle DIR" in capsys.readouterr().err
    assert trialog(["reproduce", "ep-0"]) == 2
    assert "--run RUN, or a bundle" in capsys.readouterr().err


def test_the_bundle_command_writes_verifies_and_summarises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ops.runlog
    from ops.cli import bundle as bundle_cli
    from ops.cli import kit

    source = LocalObjectStore(tmp_path / "objects")
    log, _ = _run_with_a_task(source)
    topics = _by_topic(log)
    monkeypatch.setattr(kit, "require_kafka", lambda bootstrap, *_: bootstrap)  # no broker here
    monkeypatch.setattr(bundle_cli, "_run_topics", lambda bootstrap, run, timeout_s: list(topics))
    monkeypatch.setattr(ops.runlog, "read_topics", lambda bootstrap, run, bases, **_: iter(topics[bases[0]]))
    monkeypatch.setattr(bundle_cli, "_image_recipes", list)
    out = tmp_path / "out"
    argv = ["bundle", "r1", str(out), "--bootstrap", "kafka:9", "--objects", str(source.root)]
    assert trialog(argv) == 0
    captured = capsys.readouterr()
    assert "bundle: episode.events: 16 records" in captured.err and "reading the bundle back" in captured.err
    assert "episode.events" in captured.out and "3 named by the log, 3 copied" in captured.out
    assert Bundle.open(out).topics["episode.events"] == 16
    assert trialog(argv) == 2  # OUT is no longer empty
    assert "is not an empty folder" in capsys.readouterr().err
    assert trialog([*argv[:2], str(tmp_path / "other"), "--objects", str(tmp_path / "nowhere")]) == 2
    assert "no object store at" in capsys.readouterr().err
