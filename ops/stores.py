"""The run's object store as every command and worker on this machine opens it: the location `--objects`
names, else `$TRIALOG_OBJECT_STORE`, else the stack's folder (`$TRIALOG_HOME/objects`).

A location is a folder, `file:///PATH` or `s3://BUCKET[/PREFIX]` (`schemas.object_stores`). An S3 store is
asked once when opened (`S3ObjectStore.check`), so a worker pointed at an endpoint that is down or a bucket
that does not exist stops at start-up with the fix, not at its first snapshot.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, TypeAlias

from ops.paths import Paths
from schemas.blobs import LocalObjectStore, ObjectStoreUnavailable
from schemas.object_stores import OBJECT_STORE_ENV, StoreLocation, open_object_store, parse_location
from streams.errors import StackError

if TYPE_CHECKING:  # obstore is loaded only by a process that opens an S3 store
    from schemas.s3_store import S3ObjectStore

ObjectStores: TypeAlias = "LocalObjectStore | S3ObjectStore"


def stack_location(paths: Paths | None = None) -> StoreLocation:
    """`$TRIALOG_OBJECT_STORE` when set (a `StackError` if it is not a location), else the stack's folder."""
    configured = os.environ.get(OBJECT_STORE_ENV, "")
    if configured:
        try:
            return parse_location(configured)
        except ValueError as exc:
            raise StackError(
                f"{OBJECT_STORE_ENV}: {exc}", f"set {OBJECT_STORE_ENV} to a folder or an s3:// URL"
            ) from None
    return StoreLocation(folder=(paths or Paths.from_env()).objects)


def location_of(given: StoreLocation | None, paths: Paths | None = None) -> StoreLocation:
    return given if given is not None else stack_location(paths)


def open_objects(given: StoreLocation | None = None, paths: Paths | None = None) -> ObjectStores:
    """The store at `given` (else the stack's, see `stack_location`); an S3 one is checked (one request),
    and anything unusable is a `StackError` that says what to do."""
    location = location_of(given, paths)
    try:
        store = open_object_store(location)
    except ValueError as exc:
        raise StackError(f"object store {location}: {exc}", "see docs/object-store.md") from None
    if not isinstance(store, LocalObjectStore):
        try:
            store.check()
        except ObjectStoreUnavailable as exc:
            raise StackError(exc.message, exc.hint) from None
    return store
