"""Choosing an object store from one string: a folder (a path or a `file://` URL) or an S3 bucket
(`s3://BUCKET[/PREFIX]`, its endpoint and credentials from the environment: `schemas.s3_store`).

Parsing touches nothing, so a command refuses a bad location before it connects to anything; opening an
S3 store checks its credentials are set, and `S3ObjectStore.check()` then asks the server.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from schemas.blobs import LocalObjectStore

if TYPE_CHECKING:
    from schemas.s3_store import S3ObjectStore

OBJECT_STORE_ENV = "TRIALOG_OBJECT_STORE"
FORMS = "a folder, file:///PATH or s3://BUCKET[/PREFIX]"


@dataclass(frozen=True)
class StoreLocation:
    """Exactly one of: a folder, or a bucket with a key prefix ('' for the bucket's top)."""

    folder: Path | None = None
    bucket: str = ""
    prefix: str = ""

    @property
    def is_s3(self) -> bool:
        return self.folder is None

    def __str__(self) -> str:
        """The form `parse_location` reads back (what a worker's command line carries)."""
        if self.folder is not None:
            return str(self.folder)
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_location(text: str) -> StoreLocation:
    """A `StoreLocation`, or a `ValueError` that names the accepted forms."""
    if not text.strip():
        raise ValueError(f"an empty object store location: give {FORMS}")
    if "://" not in text:
        return StoreLocation(folder=Path(text))
    parts = urlsplit(text)
    if parts.query or parts.fragment:
        raise ValueError(f"{text!r}: an object store location has no query or fragment ({FORMS})")
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise ValueError(f"{text!r}: a file URL names a local absolute path (file:///PATH)")
        return StoreLocation(folder=Path(unquote(parts.path)))
    if parts.scheme == "s3":
        from schemas.s3_store import check_bucket, check_prefix

        if not parts.netloc:
            raise ValueError(f"{text!r} names no bucket (s3://BUCKET[/PREFIX])")
        return StoreLocation(bucket=check_bucket(parts.netloc), prefix=check_prefix(parts.path))
    raise ValueError(f"{text!r}: unsupported scheme {parts.scheme!r}; give {FORMS}")


def open_object_store(
    location: str | Path | StoreLocation, env: Mapping[str, str] | None = None
) -> LocalObjectStore | S3ObjectStore:
    """The store at `location` (parsed first when given as text). No request is made: an S3 store's
    settings (endpoint `TRIALOG_S3_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    `AWS_REGION`, read from `env`, default the process's) are checked, a `ValueError` if unusable."""
    if isinstance(location, Path):
        location = StoreLocation(folder=location)
    elif isinstance(location, str):
        location = parse_location(location)
    if location.folder is not None:
        return LocalObjectStore(location.folder)
    from schemas.s3_store import S3ObjectStore, S3Settings

    return S3ObjectStore(S3Settings.from_env(location.bucket, location.prefix, env))
