"""The codec: single-object framing, round trips of every schema, and one clear error for bad bytes."""

from __future__ import annotations

from dataclasses import replace
from io import BytesIO
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.actions import RunCommand
from schemas.blobs import BlobRef
from schemas.catalog import crc64_avro
from schemas.codec import HEADER_SIZE, MAGIC, Codec, DecodeError, DecodeReason, EncodeError
from schemas.common import Producer, RecordMeta, Verdict
from schemas.events import StepExecuted
from schemas.publications import PolicyPublished
from schemas.record import Record
from schemas.testing import EpisodeScript
from tests.unit.schemas.strategies import RECORDS

ROUND_TRIP = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_crc64_avro_matches_the_specification_vectors() -> None:
    # From the Avro specification's test suite (share/test/data/schema-tests.txt), as signed 64-bit ints.
    vectors = {'"null"': 7195948357588979594, '"boolean"': -6970731678124411036, '"int"': 8247732601305521295}
    for canonical, expected in vectors.items():
        assert int.from_bytes(crc64_avro(canonical), "little", signed=True) == expected


def test_every_message_schema_has_a_domain_type_and_a_strategy(codec: Codec) -> None:
    typed = {cls.SCHEMA for cls in RECORDS}
    assert typed == set(codec.catalog.names())


@pytest.mark.parametrize("record_type", list(RECORDS), ids=lambda t: t.__name__)
@ROUND_TRIP
@given(data=st.data())
def test_every_record_type_round_trips(codec: Codec, record_type: type[Record], data: st.DataObject) -> None:
    obj = data.draw(RECORDS[record_type])
    encoded = codec.encode(obj)
    assert encoded[:2] == MAGIC
    assert encoded[2:HEADER_SIZE] == codec.catalog.current(record_type.SCHEMA).fingerprint
    assert codec.decode(encoded) == obj
    assert codec.encode(codec.decode(encoded)) == encoded  # deterministic: the chain hashes these bytes


def test_body_is_plain_avro_binary_after_the_header(codec: Codec) -> None:
    from fastavro import schemaless_reader

    script = EpisodeScript(codec)
    script.start()
    event = script.execute(stdout=b"hello\n")
    encoded = codec.encode(event)
    schema = codec.catalog.current(StepExecuted.SCHEMA).parsed
    assert schemaless_reader(BytesIO(encoded[HEADER_SIZE:]), schema) == event.to_record()


def test_decode_as_checks_the_type(codec: Codec) -> None:
    script = EpisodeScript(codec)
    started = script.start()
    data = codec.encode(started)
    assert codec.decode_as(data, type(started)) == started
    with pytest.raises(DecodeError) as err:
        codec.decode_as(data, StepExecuted)
    assert err.value.reason is DecodeReason.UNEXPECTED_TYPE


def test_schema_of_reads_only_the_header(codec: Codec) -> None:
    script = EpisodeScript(codec)
    data = codec.encode(script.start())
    assert codec.schema_of(data[:HEADER_SIZE]) == ("trialog.episode.EpisodeStarted", 1)


@pytest.fixture
def step_bytes(codec: Codec) -> bytes:
    script = EpisodeScript(codec)
    script.start()
    return codec.encode(script.execute(stdout=b"ok\n", exit_code=1))


def _reason(codec: Codec, data: bytes) -> DecodeReason:
    with pytest.raises(DecodeError) as err:
        codec.decode(data)
    assert str(err.value).startswith(err.value.reason.value)
    return err.value.reason


def test_undecodable_bytes_raise_one_error_type_with_a_reason(codec: Codec, step_bytes: bytes) -> None:
    assert _reason(codec, b"") is DecodeReason.TOO_SHORT
    assert _reason(codec, step_bytes[:9]) is DecodeReason.TOO_SHORT
    assert _reason(codec, b"\x00\x01" + step_bytes[2:]) is DecodeReason.WRONG_MAGIC
    assert _reason(codec, b'{"json": "not avro"}') is DecodeReason.WRONG_MAGIC
    unknown = step_bytes[:2] + bytes(8) + step_bytes[HEADER_SIZE:]
    assert _reason(codec, unknown) is DecodeReason.UNKNOWN_FINGERPRINT
    assert _reason(codec, step_bytes + b"\x00") is DecodeReason.TRAILING_BYTES


@pytest.mark.parametrize("cut", [1, 2, 7, 40])
def test_truncated_bodies_are_reported_as_truncated(codec: Codec, step_bytes: bytes, cut: int) -> None:
    assert _reason(codec, step_bytes[:-cut]) is DecodeReason.TRUNCATED


def test_a_body_that_does_not_parse_is_malformed(codec: Codec) -> None:
    header = MAGIC + codec.catalog.current(PolicyPublished.SCHEMA).fingerprint
    # RecordMeta.event_id is a string: length 2 followed by invalid UTF-8.
    assert _reason(codec, header + b"\x04\xff\xfe" + bytes(40)) is DecodeReason.MALFORMED


def test_an_enum_index_out_of_range_is_malformed_not_a_wrong_value(codec: Codec) -> None:
    script = EpisodeScript(codec)
    script.start()
    passed = script.reward(verdict=Verdict.PASS)
    errored = codec.encode(replace(passed, verdict=Verdict.ERROR))
    encoded = codec.encode(passed)
    (offset,) = [i for i, (a, b) in enumerate(zip(encoded, errored, strict=True)) if a != b]  # the enum index
    corrupted = encoded[:offset] + b"\x7e" + encoded[offset + 1 :]  # zigzag 63: no such symbol
    assert _reason(codec, corrupted) is DecodeReason.MALFORMED


def test_encode_rejects_objects_that_do_not_fit_the_schema(codec: Codec) -> None:
    meta = RecordMeta("id", 1, Producer("learner", "l0"))
    seven: Any = "seven"  # a str where the schema has a long
    nothing: Any = None  # no weights reference at all
    wrong_type = PolicyPublished(meta, "run", seven, 0, "", BlobRef.of(b"w"), 0)
    missing_part = PolicyPublished(meta, "run", 7, 0, "", nothing, 0)
    for bad in (wrong_type, missing_part):
        with pytest.raises(EncodeError):
            codec.encode(bad)
    with pytest.raises(EncodeError):
        codec.encode_record("trialog.nope.Missing", {})


def test_dict_level_api_round_trips(codec: Codec, step_bytes: bytes) -> None:
    name, record = codec.decode_record(step_bytes)
    assert name == StepExecuted.SCHEMA
    assert codec.encode_record(name, record) == step_bytes


def test_union_tagging_is_detected_for_defined_and_named_record_branches() -> None:
    from schemas.codec import _has_record_choice

    one = {"type": "record", "name": "t.One", "fields": []}
    two = {"type": "record", "name": "t.Two", "fields": []}
    assert not _has_record_choice(
        {"type": "record", "name": "t.R", "fields": [{"name": "a", "type": ["null", one]}]}
    )
    fields = [
        {"name": "a", "type": ["null", one, {"type": "array", "items": "int"}]},
        {"name": "b", "type": ["null", two]},
        {"name": "c", "type": ["t.One", "t.Two"]},  # both only named here: defined above
    ]
    assert _has_record_choice({"type": "record", "name": "t.R", "fields": fields})


def test_encode_at_writes_a_record_with_an_older_version_of_its_schema(codec: Codec) -> None:
    """What a writer of that version produced: its fingerprint in the header, read back (upcast) as the
    same record when the older version lacks no field the record sets (the v1 StepExecuted below: its
    oom_killed is the new field's default)."""
    script = EpisodeScript(codec, episode_id="ep-encode-at")
    script.start()
    script.act(RunCommand("ls"))
    step = script.execute(stdout=b"ok\n")
    current = codec.catalog.current(StepExecuted.SCHEMA).version
    assert codec.encode_at(step, current) == codec.encode(step)
    old = codec.encode_at(step, 1)
    assert old[2:HEADER_SIZE] == codec.catalog.version(StepExecuted.SCHEMA, 1).fingerprint
    assert codec.schema_of(old) == (StepExecuted.SCHEMA, 1)
    assert codec.decode(old) == replace(step, meta=replace(step.meta, traceparent=None))
