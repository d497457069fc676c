"""The kafka-python serializer/deserializer and the Faust codec, called the way those libraries call them."""

from __future__ import annotations

import pytest
from faust.serializers import codecs
from kafka.serializer import Deserializer, Serializer

from schemas.actions import RunCommand
from schemas.codec import Codec, DecodeError, DecodeReason
from schemas.events import ActionProposed
from schemas.faust_codec import CODEC_NAME, TrialogAvroCodec
from schemas.kafka_serde import AvroDeserializer, AvroSerializer
from schemas.testing import EpisodeScript


@pytest.fixture
def event(codec: Codec) -> ActionProposed:
    script = EpisodeScript(codec)
    script.start()
    return script.act(RunCommand("ls -la"))


def test_kafka_adapters_are_kafka_python_serializers(codec: Codec, event: ActionProposed) -> None:
    serializer, deserializer = AvroSerializer(codec), AvroDeserializer(codec)
    assert isinstance(serializer, Serializer) and isinstance(deserializer, Deserializer)
    headers = [("traceparent", b"00-abc-def-01")]
    data = serializer.serialize("run1.episode.events", headers, event)
    assert data == codec.encode(event)
    assert deserializer.deserialize("run1.episode.events", headers, data) == event
    # kafka-python falls back to the two-argument form for older serializers: both shapes work.
    assert serializer.serialize("t", event) == data
    assert deserializer.deserialize("t", data) == event


def test_kafka_adapters_pass_tombstones_and_raise_decode_errors(codec: Codec) -> None:
    assert AvroSerializer(codec).serialize("t", [], None) is None
    assert AvroDeserializer(codec).deserialize("t", [], None) is None
    with pytest.raises(DecodeError) as err:
        AvroDeserializer(codec).deserialize("t", [], b"\xc3\x01" + bytes(8))
    assert err.value.reason is DecodeReason.UNKNOWN_FINGERPRINT


def test_faust_codec_is_registered_and_round_trips(event: ActionProposed) -> None:
    assert isinstance(codecs.get_codec(CODEC_NAME), TrialogAvroCodec)
    data = codecs.dumps(CODEC_NAME, event)
    assert data[:2] == b"\xc3\x01"
    assert codecs.loads(CODEC_NAME, data) == event


def test_faust_codec_chains_with_other_codecs(codec: Codec, event: ActionProposed) -> None:
    chained = codecs.get_codec(f"{CODEC_NAME}|binary")
    data = chained.dumps(event)
    assert data != codec.encode(event)  # base64 on top
    assert chained.loads(data) == event
    own = TrialogAvroCodec(codec=codec)
    assert own.clone().codec is codec


def test_faust_codec_raises_decode_errors(event: ActionProposed) -> None:
    with pytest.raises(DecodeError) as err:
        codecs.loads(CODEC_NAME, b"not avro at all")
    assert err.value.reason is DecodeReason.WRONG_MAGIC
