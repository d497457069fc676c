"""The S3 object store against a real S3 server (SeaweedFS on loopback, `seaweedfs_server`): the same
contract as every other store, the local store's layout, a workspace restored on another host through the
bucket, and the errors a worker meets at start-up when the store is not usable."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import obstore
import pytest
from obstore.store import S3Store

from ops.paths import REPO_ROOT
from ops.stack.seaweedfs import SeaweedServer
from ops.stores import open_objects
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend, is_running
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from sandbox_agent.manifest import MANIFEST_MEDIA_TYPE
from schemas.blobs import TEXT_PLAIN, LocalObjectStore
from schemas.object_stores import OBJECT_STORE_ENV, StoreLocation, open_object_store
from schemas.s3_store import S3ObjectStore
from streams.errors import StackError
from tests.unit.schemas.test_object_store_contract import ObjectStoreContract, StoreUnderTest

BUCKET = "trialog-test"  # the one bucket the session's server has


@pytest.fixture
def s3_env(seaweedfs_server: SeaweedServer, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in seaweedfs_server.env().items():
        monkeypatch.setenv(name, value)
    return seaweedfs_server.env()


def s3_store(env: dict[str, str], prefix: str | None = None) -> S3ObjectStore:
    """A store under a prefix of its own: the tests share one bucket."""
    store = open_object_store(StoreLocation(bucket=BUCKET, prefix=prefix or f"t/{uuid.uuid4().hex}"), env)
    assert isinstance(store, S3ObjectStore)
    return store


def raw_bucket(env: dict[str, str], prefix: str) -> S3Store:
    """The bucket through obstore alone, for what the store never does itself (damage, list)."""
    config = {
        "endpoint": env["TRIALOG_S3_ENDPOINT_URL"],
        "access_key_id": env["AWS_ACCESS_KEY_ID"],
        "secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region": env["AWS_REGION"],
        "virtual_hosted_style_request": False,
    }
    return S3Store(BUCKET, prefix=prefix, config=config, client_options={"allow_http": True})  # type: ignore[arg-type]


class TestS3ObjectStore(ObjectStoreContract):
    @pytest.fixture
    def under_test(self, s3_env: dict[str, str]) -> StoreUnderTest:
        store = s3_store(s3_env)
        raw = raw_bucket(s3_env, store.settings.prefix)

        def corrupt(sha256: str) -> None:
            obstore.put(raw, S3ObjectStore.key_of(sha256), b"not what was put")

        return StoreUnderTest(store, corrupt)


def test_the_keys_are_the_local_layout_so_a_folder_copied_into_a_bucket_is_a_store(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    local = LocalObjectStore(tmp_path / "objects")
    refs = [
        local.put(b"a file"),
        local.put(b"a manifest", MANIFEST_MEDIA_TYPE),
        local.put(b"text", TEXT_PLAIN),
    ]
    store = s3_store(s3_env)
    raw = raw_bucket(s3_env, store.settings.prefix)
    for path in sorted((tmp_path / "objects").rglob("*")):
        if path.is_file():  # what `aws s3 sync objects/ s3://bucket/prefix/` would do
            obstore.put(raw, path.relative_to(tmp_path / "objects").as_posix(), path.read_bytes())
    assert [store.get(ref) for ref in refs] == [local.get(ref) for ref in refs]
    # ... and a store's own puts land where the folder would have them.
    other = s3_store(s3_env)
    for ref in refs:
        other.put(local.get(ref), ref.media_type)
    listed = {
        meta["path"] for chunk in obstore.list(raw_bucket(s3_env, other.settings.prefix)) for meta in chunk
    }
    files = {
        p.relative_to(tmp_path / "objects").as_posix()
        for p in (tmp_path / "objects").rglob("*")
        if p.is_file()
    }
    assert listed == files


@pytest.fixture
def sandbox_spec() -> SandboxSpec:
    from ops.stack.images import sandbox_ref

    quotas = Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=32 * MIB)
    return SandboxSpec(str(sandbox_ref()), quotas)


@pytest.fixture
def two_hosts(
    docker_client: docker.DockerClient, s3_env: dict[str, str]
) -> Iterator[tuple[DockerBackend, DockerBackend]]:
    """Two sandbox backends, each with its own client of one bucket prefix: what two hosts share."""
    prefix = f"t/{uuid.uuid4().hex}"
    labels = owned_labels("sandbox")
    yield (
        DockerBackend(docker_client, s3_store(s3_env, prefix), labels=labels),
        DockerBackend(docker_client, s3_store(s3_env, prefix), labels=labels),
    )


def test_a_workspace_snapshot_restores_on_another_host_through_the_bucket(
    docker_client: docker.DockerClient,
    two_hosts: tuple[DockerBackend, DockerBackend],
    sandbox_spec: SandboxSpec,
) -> None:
    here, elsewhere = two_hosts
    sandbox = here.create(sandbox_spec)
    try:
        here.exec(sandbox, ["sh", "-c", "mkdir -p src && seq 1 20000 > src/data.txt && ln -s src/data.txt d"])
        snapshot = here.snapshot(sandbox)
        docker_client.api.kill(sandbox.id)  # the first host loses the sandbox
        assert not is_running(docker_client, sandbox)
    finally:
        here.destroy(sandbox)
    replacement = elsewhere.create(sandbox_spec)
    try:
        elsewhere.restore(replacement, snapshot)
        assert elsewhere.snapshot(replacement) == snapshot
        assert elsewhere.exec(replacement, ["sh", "-c", "tail -1 d"]).stdout == "20000\n"
    finally:
        elsewhere.destroy(replacement)


def test_a_store_that_cannot_be_used_stops_a_worker_at_once_with_the_fix(
    s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, closed_port: Callable[[], int]
) -> None:
    cases = [
        (
            StoreLocation(bucket="no-such-bucket"),
            {},
            "bucket 'no-such-bucket' does not exist",
            "s3.bucket.create",
        ),
        (
            StoreLocation(bucket=BUCKET),
            {"AWS_SECRET_ACCESS_KEY": "wrong"},
            "SignatureDoesNotMatch",
            "AWS_SECRET",
        ),
        (
            StoreLocation(bucket=BUCKET),
            {"TRIALOG_S3_ENDPOINT_URL": f"http://127.0.0.1:{closed_port()}"},  # nothing listens there
            "failed",
            "check that the S3 server answers",
        ),
    ]
    for location, env, says, hint in cases:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        started = time.monotonic()
        with pytest.raises(StackError) as refused:
            open_objects(location)
        assert says in refused.value.message and hint in refused.value.hint
        assert time.monotonic() - started < 5  # the CLI's promise for a service that is not there
        for name in env:
            monkeypatch.setenv(name, s3_env[name])
    assert isinstance(open_objects(StoreLocation(bucket=BUCKET)), S3ObjectStore)


def test_the_environment_sends_a_command_to_the_bucket(
    s3_env: dict[str, str], tmp_path: Path, closed_port: Callable[[], int]
) -> None:
    """`TRIALOG_OBJECT_STORE` reaches the CLI: `bundle` opens (and asks) the store before Kafka, so a
    missing bucket is what it reports, and with the bucket there it gets as far as Kafka; so does `objects
    gc`, which cleans a bucket as it does a folder."""
    env = {**os.environ, **s3_env, OBJECT_STORE_ENV: "s3://no-such-bucket"}

    def trialog(*words: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "ops.cli", *words, "--json"]
        return subprocess.run(
            argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
        )

    nowhere = ["--bootstrap", f"127.0.0.1:{closed_port()}", "--timeout", "2"]  # no broker there
    done = trialog("bundle", "r1", str(tmp_path / "bundle"), *nowhere)
    assert done.returncode == 2 and "bucket 'no-such-bucket' does not exist" in done.stdout, done.stdout
    env[OBJECT_STORE_ENV] = f"s3://{BUCKET}/bundle"
    done = trialog("bundle", "r1", str(tmp_path / "bundle"), *nowhere)
    assert done.returncode == 2 and "Kafka" in done.stdout and "bucket" not in done.stdout, done.stdout
    done = trialog("objects", "gc", *nowhere)
    assert done.returncode == 2 and "Kafka" in done.stdout and "bucket" not in done.stdout, done.stdout
    env[OBJECT_STORE_ENV] = "s3://no-such-bucket"
    done = trialog("objects", "gc", *nowhere)
    assert done.returncode == 2 and "bucket 'no-such-bucket' does not exist" in done.stdout, done.stdout
