"""Choosing the object store from one string (`schemas.object_stores`, `ops.stores`): a folder stays the
default, `s3://` picks a bucket, and a bad value is refused before anything is asked of any server."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from learner.publish import blob_uri
from ops.cli import kit
from ops.paths import Paths
from ops.run_workers import worker_commands
from ops.stores import open_objects, stack_location
from schemas.blobs import BlobRef, LocalObjectStore, MemoryObjectStore
from schemas.object_stores import OBJECT_STORE_ENV, StoreLocation, open_object_store, parse_location
from schemas.s3_store import S3ObjectStore, S3Settings
from streams.errors import StackError

KEYS = {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/srv/objects", StoreLocation(folder=Path("/srv/objects"))),
        ("relative/objects", StoreLocation(folder=Path("relative/objects"))),
        ("file:///srv/my%20objects", StoreLocation(folder=Path("/srv/my objects"))),
        ("file://localhost/srv/o", StoreLocation(folder=Path("/srv/o"))),
        ("s3://trialog", StoreLocation(bucket="trialog")),
        ("s3://trialog/", StoreLocation(bucket="trialog")),
        ("s3://trialog/runs/run-42/", StoreLocation(bucket="trialog", prefix="runs/run-42")),
    ],
)
def test_locations_parse_and_print_back(text: str, expected: StoreLocation) -> None:
    location = parse_location(text)
    assert location == expected
    assert parse_location(str(location)) == location  # what a worker's command line carries


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("s3://", "names no bucket"),
        ("s3://Trialog/x", "not an S3 bucket name"),
        ("s3://tr/x", "not an S3 bucket name"),
        ("s3://trialog/a//b", "not a key prefix"),
        ("s3://trialog/a/../b", "not a key prefix"),
        ("s3://trialog/with space", "not a key prefix"),
        ("s3://trialog/x?versionId=1", "no query"),
        ("gs://trialog/x", "unsupported scheme 'gs'"),
        ("file://otherhost/srv", "local absolute path"),
    ],
)
def test_a_bad_location_is_refused_with_the_forms_it_could_take(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_location(text)


def test_the_option_checks_its_value_when_parsed() -> None:
    parser = argparse.ArgumentParser()
    kit.add_objects(parser, "the store")
    assert parser.parse_args(["--objects", "s3://trialog/r1"]).objects == StoreLocation(
        bucket="trialog", prefix="r1"
    )
    assert parser.parse_args([]).objects is None
    with pytest.raises(argparse.ArgumentTypeError, match="unsupported scheme"):
        kit.object_store("http://example.invalid/x")


def test_an_s3_store_is_opened_without_a_request_and_needs_its_settings() -> None:
    store = open_object_store("s3://trialog/runs", {**KEYS, "TRIALOG_S3_ENDPOINT_URL": "http://127.0.0.1:1"})
    assert isinstance(store, S3ObjectStore)  # nothing listens on port 1: opening asked nothing
    assert store.settings == S3Settings("trialog", "runs", "http://127.0.0.1:1", "us-east-1", "id", "secret")
    assert "secret" not in repr(store.settings)
    with pytest.raises(ValueError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        open_object_store("s3://trialog", {})
    with pytest.raises(ValueError, match="not an endpoint URL"):
        open_object_store("s3://trialog", {**KEYS, "TRIALOG_S3_ENDPOINT_URL": "127.0.0.1:8333"})
    region = open_object_store("s3://trialog", {**KEYS, "AWS_DEFAULT_REGION": "eu-west-3"})
    assert isinstance(region, S3ObjectStore) and region.settings.region == "eu-west-3"
    assert region.settings.endpoint_url is None  # AWS itself


def test_keys_and_uris_name_the_blob_as_the_local_store_lays_it_out(tmp_path: Path) -> None:
    ref = BlobRef.of(b"weights", "application/vnd.trialog.workspace-manifest+json")
    local = LocalObjectStore(tmp_path)
    s3 = S3ObjectStore(S3Settings("trialog", "r1", access_key_id="a", secret_access_key="b"))
    relative = local.path_of(ref.sha256, ref.media_type).relative_to(tmp_path).as_posix()
    assert S3ObjectStore.key_of(ref.sha256, ref.media_type) == relative
    assert S3ObjectStore.key_of(ref.sha256) == f"{ref.sha256[:2]}/{ref.sha256}"
    # What a PolicyPublished names as the weights' place: the file, the S3 key, else the hash.
    assert blob_uri(s3, ref) == f"s3://trialog/r1/{relative}"
    assert blob_uri(local, ref) == local.path_of(ref.sha256, ref.media_type).as_uri()
    assert blob_uri(MemoryObjectStore(), ref) == f"sha256:{ref.sha256}"


def test_the_environment_picks_the_store_of_every_command_and_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = Paths(tmp_path / "home", tmp_path / "cache")
    monkeypatch.delenv(OBJECT_STORE_ENV, raising=False)
    assert stack_location(paths) == StoreLocation(folder=paths.objects)  # the default stays the folder
    assert isinstance(open_objects(paths=paths), LocalObjectStore)
    commands = worker_commands("r1", "b", "scripted", [Path("t")], paths)
    assert commands["sandbox"][commands["sandbox"].index("--objects") + 1] == str(paths.objects)

    monkeypatch.setenv(OBJECT_STORE_ENV, "s3://trialog/r1")
    assert stack_location(paths) == StoreLocation(bucket="trialog", prefix="r1")
    commands = worker_commands("r1", "b", "scripted", [Path("t")], paths)
    for kind in ("sandbox", "verifier", "guard"):
        assert commands[kind][commands[kind].index("--objects") + 1] == "s3://trialog/r1"
    given = StoreLocation(folder=tmp_path / "given")  # an explicit store wins over the environment
    commands = worker_commands("r1", "b", "scripted", [Path("t")], paths, objects=given)
    assert commands["verifier"][commands["verifier"].index("--objects") + 1] == str(tmp_path / "given")

    monkeypatch.setenv(OBJECT_STORE_ENV, "ftp://nope")
    with pytest.raises(StackError, match=f"{OBJECT_STORE_ENV}: 'ftp://nope': unsupported scheme"):
        stack_location(paths)


def test_an_s3_store_without_credentials_is_a_stack_error_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(StackError, match="needs credentials"):
        open_objects(StoreLocation(bucket="trialog"))
