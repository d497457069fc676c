from __future__ import annotations

import hashlib

import pytest

from sandbox_agent.ingest import FetchedFile
from sandbox_agent.listing import RACY_WINDOW_NS, HashCache, Listed, Listing, ListingError, parse_listing
from sandbox_agent.manifest import Entry, Manifest

SECOND = 1_000_000_000
NOW = 1_800_000_000 * SECOND

# What `date +%s.%N; find -printf FIND_FORMAT` prints (copied from a real sandbox, names shortened).
RAW = (
    b"1796038706.100237454\n"
    b"d\x00555\x0060\x008\x001796038706.0534962460\x001796038706.0487796610\x00ro\x00\x00"
    b"f\x00644\x000\x007\x001796038706.0487796610\x001796038706.0487796610\x00we ird/n\nl\x00\x00"
    b"l\x00777\x004\x006\x001796038706.0447796610\x001796038706.0447796610\x00a/l\x00../x\x00"
)


def test_find_output_parses_into_entries_with_their_stamps() -> None:
    listing = parse_listing(RAW)
    assert listing.now_ns == 1796038706_100237454
    assert [(e.path, e.kind, e.mode, e.target) for e in listing.entries] == [
        ("ro", "d", 0o555, ""),
        ("we ird/n\nl", "f", 0o644, ""),
        ("a/l", "l", 0o777, "../x"),
    ]
    assert listing.entries[1].stamp == (7, 0, 1796038706_048779661, 1796038706_048779661)


def test_an_empty_workspace_lists_nothing() -> None:
    assert parse_listing(b"1796038706.100237454\n") == Listing(1796038706_100237454, ())


@pytest.mark.parametrize("raw", [b"1796038706.1\nf\x00644\x00", b"yesterday\n"])
def test_garbled_listings_are_refused(raw: bytes) -> None:
    with pytest.raises(ListingError):
        parse_listing(raw)


def listed(path: str, body: bytes, *, inode: int = 1, ctime_ns: int = NOW - SECOND) -> Listed:
    return Listed(path, "f", 0o644, "", (inode, len(body), ctime_ns, ctime_ns))


def fetched(*bodies: tuple[str, bytes]) -> dict[str, FetchedFile]:
    return {path: FetchedFile(0o644, len(body), hashlib.sha256(body).hexdigest()) for path, body in bodies}


def test_only_new_or_changed_files_are_fetched() -> None:
    cache = HashCache()
    first = Listing(NOW, (listed("a", b"aa"), listed("b", b"bb", inode=2)))
    assert cache.stale(first) == ["a", "b"]
    files = fetched(("a", b"aa"), ("b", b"bb"))
    cache.remember(first, files)
    changed_b = listed("b", b"BB", inode=2, ctime_ns=NOW)
    second = Listing(NOW + SECOND, (listed("a", b"aa"), changed_b, listed("c", b"c", inode=3)))
    assert cache.stale(second) == ["b", "c"]
    files2 = fetched(("b", b"BB"), ("c", b"c"))
    manifest = cache.manifest(second, files2)
    expected = [files["a"].sha256, files2["b"].sha256, files2["c"].sha256]
    assert [entry.sha256 for entry in manifest.files] == expected


def test_files_changed_just_before_the_listing_are_not_trusted_next_time() -> None:
    cache = HashCache()
    racy = Listing(NOW, (listed("a", b"aa", ctime_ns=NOW - RACY_WINDOW_NS // 2),))
    cache.remember(racy, fetched(("a", b"aa")))
    assert cache.stale(racy) == ["a"]  # the same stamps, but the file may have changed within that tick


def test_a_file_that_vanished_before_it_could_be_fetched_is_left_out() -> None:
    cache = HashCache()
    base = Listing(NOW, (listed("a", b"aa"),))
    cache.remember(base, fetched(("a", b"aa")))
    changed = Listing(NOW + SECOND, (listed("a", b"aaa", ctime_ns=NOW),))
    assert cache.stale(changed) == ["a"]
    assert cache.manifest(changed, {}).entries == ()  # not the old hash of a file known to have changed


def test_folders_and_links_come_from_the_listing_itself() -> None:
    listing = Listing(
        NOW, (Listed("d", "d", 0o700, "", (1, 0, 0, 0)), Listed("d/l", "l", 0o777, "x", (2, 1, 0, 0)))
    )
    manifest = HashCache().manifest(listing, {})
    assert manifest.entries == (Entry.directory("d", 0o700), Entry.link("d/l", "x"))


def test_other_kinds_of_files_are_not_snapshotted() -> None:
    listing = Listing(NOW, (Listed("fifo", "p", 0o644, "", (1, 0, 0, 0)),))
    assert HashCache().stale(listing) == [] and HashCache().manifest(listing, {}).entries == ()


def test_a_restore_seeds_what_it_wrote_so_the_next_snapshot_fetches_nothing() -> None:
    body = b"restored"
    entry = Entry.file("a", 0o644, hashlib.sha256(body).hexdigest(), len(body))
    manifest = Manifest.of([entry, Entry.file("racy", 0o644, entry.sha256, len(body))])
    listing = Listing(
        NOW, (listed("a", body), listed("racy", body, inode=2, ctime_ns=NOW), listed("extra", b"x", inode=3))
    )
    cache = HashCache()
    cache.seed(listing, manifest)
    assert cache.stale(listing) == ["racy", "extra"]  # too recent to trust, and not from the snapshot
    assert cache.manifest(listing, fetched(("racy", body), ("extra", b"x"))).files[0] == entry
