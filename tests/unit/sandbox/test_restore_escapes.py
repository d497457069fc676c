"""Issue 14, attack 2: a crafted snapshot manifest restored on the host must never write outside its folder.

Two layers are attacked: the manifest's own checks (`Manifest.from_bytes`, what every host-side restore
goes through) and, with those bypassed, `write_tree`'s no-follow writes. The outside target must not exist
afterwards.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox_agent.hosttree import UnsafeTree, write_tree
from sandbox_agent.manifest import Entry, Manifest, ManifestError

SHA = "0" * 64
# U+E000 is the bytes EE 80 80 on disk; the surrogate escapes of those bytes are another string for the
# same name, and sort before it, so the link is written first and the file would go through it.
REAL = "\ue000"
ALIAS = "\udcee\udc80\udc80"


def _rows(outside: Path) -> list[list[object]]:
    return [[ALIAS, "l", str(outside)], [REAL, "d", 0o755], [f"{REAL}/x", "f", 0o644, SHA, 6]]


def _crafted(entries: list[Entry]) -> Manifest:
    """A Manifest that skipped its checks (as a buggy or older reader might hand one over)."""
    manifest = object.__new__(Manifest)
    object.__setattr__(manifest, "entries", tuple(entries))
    return manifest


def _manifest_bytes(rows: list[list[object]]) -> bytes:
    return json.dumps({"version": 1, "entries": rows}).encode()


@pytest.mark.parametrize(
    "rows",
    [
        pytest.param([[ALIAS, "l", "/tmp"], [f"{REAL}", "d", 0o755]], id="alias-by-surrogate-escapes"),
        pytest.param([["a/../../x", "f", 0o644, SHA, 6]], id="dot-dot"),
        pytest.param([["a/./x", "f", 0o644, SHA, 6]], id="dot"),
        pytest.param([["a\0b", "f", 0o644, SHA, 6]], id="nul"),
        pytest.param([["a//b", "f", 0o644, SHA, 6]], id="empty-component"),
        pytest.param([["", "d", 0o755]], id="empty-name"),
        pytest.param([["/etc/x", "f", 0o644, SHA, 6]], id="absolute"),
        pytest.param([["\ud800", "f", 0o644, SHA, 6]], id="unencodable-surrogate"),
        pytest.param([["a", "d", 0o755], ["./a", "d", 0o755]], id="duplicate-after-normalising"),
        pytest.param([["a", "d", 0o755], ["a", "f", 0o644, SHA, 6]], id="duplicate"),
        pytest.param([["l", "l", "/"], ["l/x", "f", 0o644, SHA, 6]], id="file-under-a-link"),
        pytest.param([["l", "l", ""]], id="empty-link-target"),
        pytest.param([["l", "l", "a\0b"]], id="nul-in-link-target"),
    ],
)
def test_crafted_manifests_are_refused(rows: list[list[object]]) -> None:
    with pytest.raises(ManifestError):
        Manifest.from_bytes(_manifest_bytes(rows))


def test_the_alias_attack_is_refused_by_the_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="alias"):
        Manifest.from_bytes(_manifest_bytes(_rows(tmp_path / "outside")))


def test_write_tree_refuses_an_alias_even_unchecked(tmp_path: Path) -> None:
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    root.mkdir()
    entries = [Entry.link(ALIAS, str(outside)), Entry.file(f"{REAL}/x", 0o644, SHA, 6)]
    with pytest.raises(UnsafeTree):
        write_tree(root, _crafted(entries), lambda entry: b"pwned\n")
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("target", ["..", "/", "../outside"])
def test_write_tree_never_writes_under_a_link_even_unchecked(tmp_path: Path, target: str) -> None:
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    root.mkdir()
    for under in ("l/evil", "l/outside/evil", "l/new/evil"):
        entries = [Entry.link("l", target), Entry.file(under, 0o644, SHA, 6)]
        with pytest.raises(UnsafeTree):
            write_tree(root, _crafted(entries), lambda entry: b"pwned\n")
        dir_entries = [Entry.link("l", target), Entry.directory(under, 0o755)]
        with pytest.raises(UnsafeTree):
            write_tree(root, _crafted(dir_entries), lambda entry: b"")
    assert list(outside.iterdir()) == [] and not (tmp_path / "evil").exists() and not Path("/evil").exists()


def test_write_tree_refuses_a_file_over_a_link_it_wrote(tmp_path: Path) -> None:
    secret, root = tmp_path / "secret", tmp_path / "root"
    secret.write_text("host")
    root.mkdir()
    entries = [Entry.link("f", str(secret)), Entry.file("f", 0o644, SHA, 6)]
    with pytest.raises(UnsafeTree, match="already in the tree"):
        write_tree(root, _crafted(entries), lambda entry: b"pwned\n")
    assert secret.read_text() == "host"


def test_a_tree_with_odd_but_honest_names_still_round_trips(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    raw = os.fsdecode(b"caf\xe9")  # not UTF-8: carried as surrogate escapes, the one spelling fsdecode gives
    manifest = Manifest.of(
        [
            Entry.directory("ro", 0o555),
            Entry.file("ro/x", 0o444, SHA, 1),
            Entry.file(raw, 0o600, SHA, 1),
            Entry.link("up", ".."),
            Entry.file("\ue000", 0o644, SHA, 1),
        ]
    )
    write_tree(root, manifest, lambda entry: b"y")
    assert (root / "ro" / "x").read_bytes() == b"y" and os.readlink(root / "up") == ".."
    assert os.path.exists(os.path.join(os.fsencode(root), b"caf\xe9"))
    assert (root / "ro").stat().st_mode & 0o777 == 0o555
    assert (root / "ro" / "x").stat().st_mode & 0o777 == 0o444
