"""kafka-python adapters over the codec.

kafka-python 3 calls `serialize(topic, headers, data)` / `deserialize(topic, headers, data)` on objects
that subclass its Serializer/Deserializer (older call sites pass `(topic, data)`; both are accepted).
Decoding errors propagate as `DecodeError`: the consumer loop decides to dead-letter, not the adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas.codec import Codec, default_codec
from schemas.record import Record

if TYPE_CHECKING:  # kafka-python ships no type information; its base classes only matter at runtime
    _SerializerBase = object
    _DeserializerBase = object
else:
    from kafka.serializer import Deserializer as _DeserializerBase
    from kafka.serializer import Serializer as _SerializerBase

_NO_DATA = object()


def _payload(headers_or_data: Any, data: Any) -> Any:
    """The value from either call shape: (topic, headers, data) or the legacy (topic, data)."""
    return headers_or_data if data is _NO_DATA else data


class AvroSerializer(_SerializerBase):
    """value_serializer / key_serializer for trialog records (None passes through, e.g. tombstones)."""

    def __init__(self, codec: Codec | None = None) -> None:
        self.codec = codec or default_codec()

    def serialize(self, topic: str, headers: Any, data: Any = _NO_DATA) -> bytes | None:
        value: Record | None = _payload(headers, data)
        return None if value is None else self.codec.encode(value)

    def close(self) -> None:
        pass


class AvroDeserializer(_DeserializerBase):
    """value_deserializer for trialog records; raises schemas.codec.DecodeError on undecodable bytes."""

    def __init__(self, codec: Codec | None = None) -> None:
        self.codec = codec or default_codec()

    def deserialize(self, topic: str, headers: Any, data: Any = _NO_DATA) -> Record | None:
        value: bytes | None = _payload(headers, data)
        return None if value is None else self.codec.decode(value)

    def close(self) -> None:
        pass
