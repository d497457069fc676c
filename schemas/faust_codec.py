"""A Faust codec over the same codec functions, registered as "trialog-avro".

Use it as `app.topic(name, value_serializer="trialog-avro")` (or `key_serializer`); after importing this
module. Faust chains codecs (`"trialog-avro|gzip"`), so this one only does records <-> bytes.
"""

from __future__ import annotations

from typing import Any

from faust.serializers import codecs

from schemas.codec import Codec, default_codec

CODEC_NAME = "trialog-avro"


class TrialogAvroCodec(codecs.Codec):
    """Faust codec: `dumps(record) -> bytes`, `loads(bytes) -> record`; DecodeError on bad bytes."""

    def __init__(self, children: Any = None, codec: Codec | None = None, **kwargs: Any) -> None:
        super().__init__(children=children, **kwargs)
        self._codec = codec

    @property
    def codec(self) -> Codec:
        # Resolved on first use: registering at import time must not load every schema yet.
        if self._codec is None:
            self._codec = default_codec()
        return self._codec

    def _dumps(self, obj: Any) -> bytes:
        return self.codec.encode(obj)

    def _loads(self, s: bytes) -> Any:
        return self.codec.decode(s)

    def clone(self, *children: Any) -> TrialogAvroCodec:
        # Faust's clone rebuilds from kwargs; keep our codec instance across `|` chaining.
        return type(self)(children=self.children + children, codec=self.codec, **self.kwargs)


def register(name: str = CODEC_NAME, codec: Codec | None = None) -> TrialogAvroCodec:
    """Register the codec with Faust under `name` (idempotent) and return it."""
    instance = TrialogAvroCodec(codec=codec)
    codecs.register(name, instance)
    return instance


register()
