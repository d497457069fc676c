"""Building blocks of the model: object store and payload references, bounded outputs, clocks and ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.blobs import (
    BlobIntegrityError,
    BlobRef,
    LocalObjectStore,
    MemoryObjectStore,
    inline_or_ref,
    memory_key,
    text_or_ref,
)
from schemas.common import GENESIS_HASH, Output, Producer
from schemas.origin import FixedClock, Origin, RandomIds, SequentialIds, SystemClock


def test_local_store_is_content_addressed_and_verifies_reads(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    ref = store.put(b"weights" * 100)
    assert ref == BlobRef.of(b"weights" * 100)
    assert store.contains(ref.sha256) and store.get(ref) == b"weights" * 100
    assert store.put(b"weights" * 100) == ref  # idempotent
    path = tmp_path / ref.sha256[:2] / ref.sha256
    path.write_bytes(b"tampered")
    with pytest.raises(BlobIntegrityError):
        store.get(ref)
    with pytest.raises(BlobIntegrityError):
        store.get(BlobRef("0" * 64, 1))
    assert not list(tmp_path.rglob(".tmp-*"))


def test_memory_store_behaves_like_the_local_one() -> None:
    store = MemoryObjectStore()
    ref = store.put(b"x", "text/plain")
    assert ref.media_type == "text/plain" and store.get(ref) == b"x"
    store.blobs[memory_key(ref.sha256, ref.media_type)] = b"y"
    with pytest.raises(BlobIntegrityError):
        store.get(ref)


def test_payloads_over_the_cap_go_by_reference() -> None:
    store = MemoryObjectStore()
    assert inline_or_ref(b"a" * 10, store, cap=10) == b"a" * 10
    ref = inline_or_ref(b"a" * 11, store, cap=10)
    assert isinstance(ref, BlobRef) and store.get(ref) == b"a" * 11
    assert text_or_ref("é" * 5, store, cap=10) == "é" * 5  # 10 bytes in UTF-8
    assert isinstance(text_or_ref("é" * 6, store, cap=10), BlobRef)


def test_outputs_are_bounded_with_truncation_info() -> None:
    store = MemoryObjectStore()
    short = Output.capture(b"ok\n", 10)
    assert (short.text, short.truncated, short.total_bytes, short.full) == ("ok\n", False, 3, None)
    long = Output.capture(b"x" * 25, 10, store)
    assert (long.text, long.truncated, long.total_bytes) == ("x" * 10, True, 25)
    assert long.full is not None and store.get(long.full) == b"x" * 25
    cut = Output.capture("ü".encode() * 3, 3)  # a cut inside a UTF-8 sequence must not raise
    assert cut.text.startswith("ü") and cut.truncated


def test_fixed_sources_are_deterministic_and_system_sources_are_not() -> None:
    clock = FixedClock(start_us=100, step_us=5)
    assert [clock.now_us() for _ in range(3)] == [100, 105, 110]
    ids = SequentialIds("ev")
    assert [ids.new_id(), ids.new_id()] == ["ev-000001", "ev-000002"]
    assert RandomIds().new_id() != RandomIds().new_id()
    assert SystemClock().now_us() > 1_600_000_000_000_000


def test_origin_stamps_headers_and_answers_keep_the_idempotency_key() -> None:
    owner = Origin(Producer("streams", "s0"), FixedClock(1_000), SequentialIds("req"))
    request = owner.event_meta(
        run_id="r",
        episode_id="e",
        task_id="t",
        task_version="v",
        step=3,
        attempt=2,
        policy_version=9,
        prev_hash=GENESIS_HASH,
        snapshot_id="snap-2",
    )
    assert (request.event_id, request.occurred_at_us, request.producer.kind) == (
        "req-000001",
        1_000,
        "streams",
    )
    sandbox = Origin(Producer("sandbox", "sb0"), FixedClock(5_000), SequentialIds("sb"))
    answer = sandbox.reply_meta(request)
    assert (answer.step, answer.attempt, answer.prev_hash, answer.episode_id) == (3, 2, GENESIS_HASH, "e")
    assert (answer.event_id, answer.occurred_at_us, answer.producer.kind) == ("sb-000001", 5_000, "sandbox")
    meta = owner.record_meta("00-trace-span-01")
    assert meta.traceparent == "00-trace-span-01" and meta.event_id == "req-000002"
    assert Origin.system("rollout", "r0").producer == Producer("rollout", "r0")
