"""File names on the wire: any name Linux allows, carried losslessly in an Avro `string`.

In memory a path is the `str` that `os.fsdecode` gives: a byte that is not part of valid UTF-8 becomes a
lone surrogate (U+DC80..U+DCFF), the form sandbox manifests and tarballs already carry. Such a `str`
cannot be encoded as UTF-8, so an Avro string holding it fails to encode, and with it the whole record.
That was a way to erase a grade: a protected file renamed to `tests/\\xff.py` made the -1.0 `RewardAssigned`
unencodable, the answer was dead-lettered and the episode ended as a verifier error, never trained on.

Wire form (`to_wire`), chosen because it needs no schema change and stays readable in every log reader:
each byte that is not valid UTF-8 is written `\\xHH` (two lowercase hex digits) and each backslash is
doubled; everything else is the name's own UTF-8. `from_wire` reverses it exactly. Bytes would be the other
lossless choice, but the field is a `string` in `RewardAssigned` and in the `EpisodeSnapshot` that embeds
it, and a person reading a log would see bytes where a name is expected.

Records written before this form existed never hold a lone surrogate (they could not be encoded), so the
only old names `from_wire` could misread are ones that literally contained `\\\\` or `\\x` followed by two
hex digits; any other backslash is kept as written.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(\\|x[0-9a-fA-F]{2})")


def to_wire(path: str) -> str:
    """`path` (an `os.fsdecode` name) as valid Unicode text, reversible by `from_wire`.

    Raises UnicodeEncodeError for a surrogate that `os.fsdecode` never produces (outside U+DC80..U+DCFF):
    no file can have that name, so it is a bug upstream, not something to write down.
    """
    raw = path.encode("utf-8", "surrogateescape")
    # 0x5c never occurs inside a multi-byte UTF-8 sequence, so doubling it bytewise is safe; decoding with
    # backslashreplace then writes each undecodable byte as \xHH.
    return raw.replace(b"\\", b"\\\\").decode("utf-8", "backslashreplace")


def from_wire(text: str) -> str:
    """The `os.fsdecode` name that `to_wire` wrote as `text`."""
    if "\\" not in text:
        return text
    out = bytearray()
    position = 0
    for match in _ESCAPE.finditer(text):
        out += text[position : match.start()].encode("utf-8")
        escaped = match.group(1)
        out += b"\\" if escaped == "\\" else bytes([int(escaped[1:], 16)])
        position = match.end()
    out += text[position:].encode("utf-8")
    return out.decode("utf-8", "surrogateescape")


def to_wire_all(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(to_wire(path) for path in paths)


def from_wire_all(paths: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(from_wire(path) for path in paths)
