"""The schema catalog: every known version of every record schema, found by name or by fingerprint.

Schemas are plain `.avsc` files, one per named type, named `<fullname>.avsc` and referring to each other
by full name. A file with a top-level `"version"` attribute is a *message* (something encoded on its own);
the others are shared parts. Earlier versions of a message live in `history/<fullname>.v<N>.avsc` as
frozen, self-contained copies (every named type inlined), so that changing a shared part later can never
change what an old version meant.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.schema import fingerprint as avro_fingerprint
from fastavro.schema import to_parsing_canonical_form

SCHEMA_DIR = Path(__file__).resolve().parent / "avsc"
HISTORY_DIR_NAME = "history"

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})
_HISTORY_FILE = re.compile(r"^(?P<name>.+)\.v(?P<version>[0-9]+)\.avsc$")

Json = Any  # a JSON value as loaded by json.loads


class SchemaError(Exception):
    """The schema files are inconsistent (unknown reference, duplicate name, fingerprint clash...)."""


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One version of one message schema, compiled once at load time."""

    name: str
    version: int
    parsed: dict[str, Any]  # fastavro.parse_schema output, reused by every encode/decode
    canonical: str  # Avro Parsing Canonical Form
    fingerprint: bytes  # CRC-64-AVRO of `canonical`, 8 bytes little-endian, as in single-object encoding

    @property
    def fingerprint_hex(self) -> str:
        return self.fingerprint.hex()


def crc64_avro(canonical_form: str) -> bytes:
    """CRC-64-AVRO fingerprint of a canonical form, as the 8 little-endian bytes framing uses."""
    return bytes.fromhex(avro_fingerprint(canonical_form, "CRC-64-AVRO"))


def expand(name: str, definitions: Mapping[str, Json]) -> dict[str, Any]:
    """The schema of `name` with every referenced named type inlined at its first use (full names only).

    This is what a writer schema must look like on its own: the canonical form (and so the fingerprint) of
    the result does not depend on how the definitions were split into files.
    """
    defined: set[str] = set()

    def visit(node: Json, namespace: str) -> Json:
        if isinstance(node, str):
            if node in _PRIMITIVES:
                return node
            full = node if "." in node or not namespace else f"{namespace}.{node}"
            if full in defined:
                return full
            if full not in definitions:
                raise SchemaError(f"{name}: unknown type {full!r}")
            return visit(definitions[full], namespace)
        if isinstance(node, list):
            return [visit(branch, namespace) for branch in node]
        if not isinstance(node, dict):
            raise SchemaError(f"{name}: not a schema: {node!r}")
        kind = node.get("type")
        if kind in _NAMED:
            return visit_named(node, namespace)
        if kind == "array":
            return {**node, "items": visit(node["items"], namespace)}
        if kind == "map":
            return {**node, "values": visit(node["values"], namespace)}
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return node
        return visit(kind, namespace)  # {"type": <a named type or a union>}

    def visit_named(node: dict[str, Any], namespace: str) -> dict[str, Any]:
        short = node["name"]
        full = short if "." in short else ".".join(p for p in (node.get("namespace", namespace), short) if p)
        if full in defined:
            raise SchemaError(f"{name}: {full} is defined twice")
        defined.add(full)
        out = {key: value for key, value in node.items() if key != "namespace"}
        out["name"] = full
        if node["type"] in ("record", "error"):
            inner = full.rpartition(".")[0]
            out["fields"] = [{**fld, "type": visit(fld["type"], inner)} for fld in node["fields"]]
        return out

    if name not in definitions:
        raise SchemaError(f"unknown schema {name!r}")
    expanded = visit(definitions[name], "")
    if not isinstance(expanded, dict):
        raise SchemaError(f"{name}: a message schema must be a named type")
    return expanded


def compile_version(name: str, version: int, expanded: dict[str, Any]) -> SchemaVersion:
    parsed = parse_schema(expanded)
    if not isinstance(parsed, dict):
        raise SchemaError(f"{name}: a message schema must be a record")
    canonical = to_parsing_canonical_form(parsed)
    return SchemaVersion(name, version, parsed, canonical, crc64_avro(canonical))


def _read_json(path: Path) -> Json:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SchemaError(f"{path}: {exc}") from exc


def _full_name(node: Json, path: Path) -> str:
    if not isinstance(node, dict) or "name" not in node:
        raise SchemaError(f"{path}: a schema file holds one named type")
    short = str(node["name"])
    return short if "." in short else ".".join(p for p in (node.get("namespace", ""), short) if p)


def load_definitions(folder: Path) -> dict[str, Json]:
    """Every `<fullname>.avsc` directly in `folder`, by full name."""
    definitions: dict[str, Json] = {}
    for path in sorted(folder.glob("*.avsc")):
        node = _read_json(path)
        full = _full_name(node, path)
        if path.name != f"{full}.avsc":
            raise SchemaError(f"{path}: holds {full}; name the file {full}.avsc")
        definitions[full] = node
    return definitions


def _current_versions(folder: Path) -> Iterator[SchemaVersion]:
    definitions = load_definitions(folder)
    for full, node in definitions.items():
        if "version" in node:
            yield compile_version(full, int(node["version"]), expand(full, definitions))


def _history_versions(folder: Path) -> Iterator[SchemaVersion]:
    for path in sorted(folder.glob("*.avsc")):
        match = _HISTORY_FILE.match(path.name)
        if match is None:
            raise SchemaError(f"{path}: history files are named <fullname>.v<N>.avsc")
        node = _read_json(path)
        full, version = _full_name(node, path), int(match["version"])
        if full != match["name"] or node.get("version") != version:
            raise SchemaError(f"{path}: holds {full} version {node.get('version')}")
        yield compile_version(full, version, expand(full, {full: node}))


class SchemaCatalog:
    """All versions of all message schemas; the newest version of each is the one written and read to."""

    def __init__(self, versions: Iterable[SchemaVersion]) -> None:
        self._by_name: dict[str, dict[int, SchemaVersion]] = {}
        self._by_fingerprint: dict[bytes, SchemaVersion] = {}
        for sv in versions:
            self._add(sv)
        self._current = {name: by_v[max(by_v)] for name, by_v in self._by_name.items()}

    def _add(self, sv: SchemaVersion) -> None:
        by_version = self._by_name.setdefault(sv.name, {})
        if sv.version in by_version:
            raise SchemaError(f"{sv.name} version {sv.version} is defined twice")
        clash = self._by_fingerprint.get(sv.fingerprint)
        if clash is not None:
            raise SchemaError(
                f"{sv.name} v{sv.version} has the fingerprint of {clash.name} v{clash.version}: "
                "a new version must change the schema, and two messages must differ"
            )
        by_version[sv.version] = sv
        self._by_fingerprint[sv.fingerprint] = sv

    @classmethod
    def from_folder(cls, folder: Path = SCHEMA_DIR) -> SchemaCatalog:
        history = folder / HISTORY_DIR_NAME
        current = {sv.name: sv for sv in _current_versions(folder)}
        old = list(_history_versions(history)) if history.is_dir() else []
        for sv in old:
            if sv.name not in current or sv.version >= current[sv.name].version:
                raise SchemaError(
                    f"history holds {sv.name} v{sv.version}, which is not older than the current one"
                )
        return cls([*current.values(), *old])

    def current(self, name: str) -> SchemaVersion:
        try:
            return self._current[name]
        except KeyError:
            raise SchemaError(f"no schema named {name!r}") from None

    def version(self, name: str, version: int) -> SchemaVersion:
        try:
            return self._by_name[name][version]
        except KeyError:
            raise SchemaError(f"no schema {name!r} version {version}") from None

    def by_fingerprint(self, fingerprint: bytes) -> SchemaVersion | None:
        return self._by_fingerprint.get(fingerprint)

    def versions(self, name: str) -> tuple[SchemaVersion, ...]:
        return tuple(sv for _, sv in sorted(self._by_name.get(name, {}).items()))

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._current))

    def all_versions(self) -> tuple[SchemaVersion, ...]:
        return tuple(sv for name in self.names() for sv in self.versions(name))

    def manifest(self) -> dict[str, dict[str, str]]:
        """name -> version -> fingerprint (hex): committed as `fingerprints.json` to catch silent changes."""
        return {
            name: {str(sv.version): sv.fingerprint_hex for sv in self.versions(name)} for name in self.names()
        }
