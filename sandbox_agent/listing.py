"""Incremental snapshots of a sandbox: list the workspace cheaply, fetch only the files that changed.

The listing (one `find` in the sandbox) gives each entry's inode, size, change time and modification
time. A file whose four figures match what the previous snapshot of the same sandbox saw has the hash it
had then; only the others are fetched and hashed. The change time (ctime) cannot be set by an unprivileged
process, so rewriting a file and putting its mtime back does not fool this. A file changed within
`RACY_WINDOW_NS` of the listing is not remembered (git's "racy clean" rule): a write in the same clock tick
could leave all four figures unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sandbox_agent.ingest import FetchedFile
from sandbox_agent.manifest import Entry, Manifest
from sandbox_agent.paths import WORKSPACE

# Two clock ticks at HZ=100 (ctime is stamped from the coarse tick clock, unless the kernel has fine-grained
# timestamps): a file modified after it was listed, in the tick it was last stamped in, looks unchanged.
RACY_WINDOW_NS = 20_000_000
_FIELDS = 8
# kind, mode (octal), size, inode, ctime, mtime, relative path, link target; each field NUL-terminated.
FIND_FORMAT = r"%y\0%m\0%s\0%i\0%C@\0%T@\0%P\0%l\0"
# The sandbox's clock first (the same clock that stamps ctimes), then the entries; "$0" is FIND_FORMAT.
LIST_SCRIPT = f'date +%s.%N && exec find {WORKSPACE} -mindepth 1 -printf "$0"'
LISTING_ARGV = ["sh", "-c", LIST_SCRIPT, FIND_FORMAT]
# Long enough after a write for its ctime to fall out of the racy window (what a restore waits).
PAST_RACY_WINDOW_S = RACY_WINDOW_NS / 1e9 + 0.01


class ListingError(ValueError):
    """Output of the listing command that does not parse."""


@dataclass(frozen=True, slots=True)
class Listed:
    path: str
    kind: str  # find's %y: f (file), d (folder), l (link); anything else is not snapshotted
    mode: int
    target: str
    stamp: tuple[int, int, int, int]  # inode, size, ctime ns, mtime ns: equal stamps, equal content

    @property
    def ctime_ns(self) -> int:
        return self.stamp[2]


@dataclass(frozen=True, slots=True)
class Listing:
    now_ns: int
    entries: tuple[Listed, ...]

    def files(self) -> list[Listed]:
        return [entry for entry in self.entries if entry.kind == "f"]


def parse_listing(data: bytes) -> Listing:
    clock, _, rest = data.partition(b"\n")
    fields = rest.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    if len(fields) % _FIELDS:
        raise ListingError(f"{len(fields)} listing fields are not whole entries of {_FIELDS}")
    entries = [_listed(fields[i : i + _FIELDS]) for i in range(0, len(fields), _FIELDS)]
    return Listing(_ns(clock), tuple(entries))


def _listed(fields: list[bytes]) -> Listed:
    kind, mode, size, inode, ctime, mtime, path, target = fields
    return Listed(
        path=path.decode("utf-8", "surrogateescape"),
        kind=kind.decode("ascii"),
        mode=int(mode, 8),
        target=target.decode("utf-8", "surrogateescape"),
        stamp=(int(inode), int(size), _ns(ctime), _ns(mtime)),
    )


def _ns(text: bytes) -> int:
    """Nanoseconds from find's and date's '1796038706.0534962460' (seconds with a fraction)."""
    try:
        seconds, _, fraction = text.strip().decode("ascii").partition(".")
        return int(seconds) * 1_000_000_000 + int((fraction + "000000000")[:9])
    except ValueError:
        raise ListingError(f"not a timestamp: {text!r}") from None


@dataclass(frozen=True, slots=True)
class KnownFile:
    stamp: tuple[int, int, int, int]
    sha256: str
    size: int


@dataclass
class HashCache:
    """What the previous snapshot of one sandbox learnt: file path -> stamp and content hash."""

    known: dict[str, KnownFile] = field(default_factory=dict)

    def stale(self, listing: Listing) -> list[str]:
        """Files to fetch: new ones, changed ones, and ones not trusted last time."""
        return [item.path for item in listing.files() if self._unchanged(item) is None]

    def manifest(self, listing: Listing, fetched: Mapping[str, FetchedFile]) -> Manifest:
        """The tree as listed; fetched files take mode and hash from what was fetched.

        A listed file that was not fetched and is not known vanished (or became unreadable) in between:
        it is left out, as it is not in the workspace any more (the next listing will say so too).
        """
        entries: list[Entry] = []
        for item in listing.entries:
            if item.kind == "d":
                entries.append(Entry.directory(item.path, item.mode))
            elif item.kind == "l":
                entries.append(Entry.link(item.path, item.target))
            elif item.kind == "f" and item.path in fetched:
                body = fetched[item.path]
                entries.append(Entry.file(item.path, body.mode, body.sha256, body.size))
            elif item.kind == "f" and (known := self._unchanged(item)) is not None:
                entries.append(Entry.file(item.path, item.mode, known.sha256, known.size))
        return Manifest.of(entries)

    def _unchanged(self, item: Listed) -> KnownFile | None:
        known = self.known.get(item.path)
        return known if known is not None and known.stamp == item.stamp else None

    def remember(self, listing: Listing, fetched: Mapping[str, FetchedFile]) -> None:
        trusted_before = listing.now_ns - RACY_WINDOW_NS
        known: dict[str, KnownFile] = {}
        for item in listing.files():
            if item.ctime_ns >= trusted_before:
                continue
            if item.path in fetched:
                body = fetched[item.path]
                known[item.path] = KnownFile(item.stamp, body.sha256, body.size)
            elif (unchanged := self._unchanged(item)) is not None:
                known[item.path] = unchanged
        self.known = known

    def seed(self, listing: Listing, manifest: Manifest) -> None:
        """Know the files just restored from `manifest`, so that the next snapshot fetches only changes."""
        restored = {entry.path: entry for entry in manifest.files}
        trusted_before = listing.now_ns - RACY_WINDOW_NS
        self.known = {
            item.path: KnownFile(item.stamp, entry.sha256, entry.size)
            for item in listing.files()
            if (entry := restored.get(item.path)) is not None
            and item.stamp[1] == entry.size
            and item.ctime_ns < trusted_before
        }

    def forget(self) -> None:
        self.known = {}
