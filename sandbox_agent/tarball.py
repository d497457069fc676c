"""Tar streams in and out of a sandbox: trees go in through `tar -x` and files come out through `tar -c`.

GNU format with raw (surrogate-escaped) names, so any path a Linux file system allows makes the trip.
Ownership and timestamps are not carried: the sandbox's user owns what it extracts, at extraction time.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sandbox_agent.manifest import Entry, Kind, Manifest

ENCODING = "utf-8"
ERRORS = "surrogateescape"


def tree_tar(manifest: Manifest, content: Callable[[Entry], bytes]) -> bytes:
    """A tar of the manifest's tree, folders before what they hold, file bodies from `content`."""
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT, encoding=ENCODING, errors=ERRORS
    ) as tar:
        for entry in manifest.entries:
            info = tarfile.TarInfo(entry.path)
            info.mode = entry.mode
            if entry.kind is Kind.DIR:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif entry.kind is Kind.LINK:
                info.type = tarfile.SYMTYPE
                info.linkname = entry.target
                tar.addfile(info)
            else:
                body = content(entry)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def files_tar(files: Mapping[str, bytes], mode: int = 0o644) -> bytes:
    """A tar of regular files at the given relative paths (their folders are created by `tar -x`)."""
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT, encoding=ENCODING, errors=ERRORS
    ) as tar:
        for path, body in files.items():
            info = tarfile.TarInfo(path)
            info.mode = mode
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


@dataclass(frozen=True, slots=True)
class TarFile:
    mode: int
    content: bytes


def regular_files(data: bytes) -> dict[str, TarFile]:
    """The regular files in a tar stream by member name; other members (folders, links) are skipped."""
    found: dict[str, TarFile] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:", encoding=ENCODING, errors=ERRORS) as tar:
        for member in tar:
            if not member.isreg():
                continue
            body = tar.extractfile(member)
            if body is not None:
                found[member.name] = TarFile(member.mode, body.read())
    return found
