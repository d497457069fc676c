from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_agent.manifest import Entry, Kind, Manifest, ManifestError, SnapshotId

SHA_A = hashlib.sha256(b"a").hexdigest()
SHA_B = hashlib.sha256(b"b").hexdigest()


def tree() -> list[Entry]:
    return [
        Entry.directory("src", 0o755),
        Entry.file("src/a.py", 0o644, SHA_A, 1),
        Entry.link("src/link", "a.py"),
        Entry.file("caf\udce9", 0o600, SHA_B, 1),  # a non-UTF-8 name, as os.fsdecode gives it
        Entry.directory("empty", 0o700),
    ]


def test_the_id_depends_on_the_tree_not_on_the_order_it_was_read_in() -> None:
    assert Manifest.of(tree()).snapshot_id() == Manifest.of(reversed(tree())).snapshot_id()


@pytest.mark.parametrize(
    "change",
    [
        Entry.file("src/a.py", 0o755, SHA_A, 1),  # mode
        Entry.file("src/a.py", 0o644, SHA_B, 1),  # content
        Entry.link("src/a.py", "elsewhere"),  # kind
    ],
)
def test_any_change_to_a_file_changes_the_id(change: Entry) -> None:
    changed = [change if entry.path == change.path else entry for entry in tree()]
    assert Manifest.of(changed).snapshot_id() != Manifest.of(tree()).snapshot_id()


def test_set_id_bits_are_never_carried() -> None:
    assert Entry.file("x", 0o4755, SHA_A, 1).mode == 0o755
    assert Entry.directory("d", 0o1777).mode == 0o1777  # the sticky bit is kept


def test_bytes_round_trip_exactly() -> None:
    manifest = Manifest.of(tree())
    again = Manifest.from_bytes(manifest.to_bytes())
    assert again == manifest and again.to_bytes() == manifest.to_bytes()
    assert manifest.files == (
        Entry.file("caf\udce9", 0o600, SHA_B, 1),
        Entry.file("src/a.py", 0o644, SHA_A, 1),
    )


@pytest.mark.parametrize(
    "entries",
    [
        [Entry.file("../x", 0o644, SHA_A, 1)],
        [Entry.file("/etc/passwd", 0o644, SHA_A, 1)],
        [Entry.file("a//b", 0o644, SHA_A, 1)],
        [Entry.file("b", 0o644, SHA_A, 1), Entry.file("a", 0o644, SHA_A, 1)],  # unsorted
        [Entry.file("a", 0o644, SHA_A, 1), Entry.file("a", 0o644, SHA_A, 1)],  # repeated
        [Entry.link("a", "/etc"), Entry.file("a/passwd", 0o644, SHA_A, 1)],  # through a link
        [Entry.file("a", 0o644, SHA_A, 1), Entry.file("a/b", 0o644, SHA_A, 1)],  # inside a file
        [Entry.file("a", 0o644, "not-a-hash", 1)],
    ],
)
def test_entries_that_do_not_form_a_safe_tree_are_refused(entries: list[Entry]) -> None:
    with pytest.raises(ManifestError):
        Manifest(tuple(entries))


@pytest.mark.parametrize(
    "data", [b"not json", b"[]", b'{"version": 2, "entries": []}', b'{"version":1,"entries":[["a","x"]]}']
)
def test_bytes_that_are_not_a_manifest_are_refused(data: bytes) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_bytes(data)


def test_snapshot_ids_print_and_parse() -> None:
    snapshot_id = Manifest.of(tree()).snapshot_id()
    assert SnapshotId.parse(str(snapshot_id)) == snapshot_id
    assert str(snapshot_id) == f"snap-{snapshot_id.sha256}-{snapshot_id.size}"
    assert snapshot_id.manifest_ref.sha256 == hashlib.sha256(Manifest.of(tree()).to_bytes()).hexdigest()
    with pytest.raises(ValueError, match="not a snapshot id"):
        SnapshotId.parse("snap-123")


_names = st.text(
    st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)), min_size=1, max_size=8
)


@given(
    st.dictionaries(_names.filter(lambda name: name not in (".", "..")), st.binary(max_size=8), max_size=6)
)
def test_any_flat_tree_round_trips(files: dict[str, bytes]) -> None:
    entries = [
        Entry.file(name, 0o644, hashlib.sha256(body).hexdigest(), len(body)) for name, body in files.items()
    ]
    manifest = Manifest.of(entries)
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest
    assert {entry.path for entry in manifest.entries if entry.kind is Kind.FILE} == set(files)
