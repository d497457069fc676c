from __future__ import annotations

import hashlib

from sandbox_agent.manifest import Entry, Manifest
from sandbox_agent.tarball import TarFile, files_tar, regular_files, tree_tar

BODIES = {"x.py": b"print(1)\n", "caf\udce9/-rf": b"\x00\xff" * 100, "a" * 150: b"long name"}


def test_files_survive_a_tar_round_trip_whatever_their_names() -> None:
    assert regular_files(files_tar(BODIES)) == {path: TarFile(0o644, body) for path, body in BODIES.items()}


def test_a_tree_tar_holds_folders_links_and_files_with_their_modes() -> None:
    entries = [Entry.directory("caf\udce9", 0o555), Entry.link("link", "x.py")]
    entries += [Entry.file(p, 0o600, hashlib.sha256(b).hexdigest(), len(b)) for p, b in BODIES.items()]
    manifest = Manifest.of(entries)
    by_hash = {hashlib.sha256(body).hexdigest(): body for body in BODIES.values()}
    archive = tree_tar(manifest, lambda entry: by_hash[entry.sha256])
    assert regular_files(archive) == {path: TarFile(0o600, body) for path, body in BODIES.items()}
