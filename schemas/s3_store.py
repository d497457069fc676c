"""An S3-compatible object store (AWS S3, SeaweedFS, Ceph RGW, ...), for runs whose sandbox, verifier and
learner workers live on different hosts and so cannot share a folder.

Keys mirror the local folder's layout under the location's prefix: `<prefix>/<sha[:2]>/<sha>` for
octet-stream, `<prefix>/typed/<type>/<sha[:2]>/<sha>` for every other media type (`schemas.blobs`), so a
folder copied into a bucket (or back) is a store as it is. Every read is verified against the reference's
sha256 and size, as the local store does: the bucket is as untrusted as a folder.

The client is obstore (object_store in Rust): typed, thread-safe, no dependency beyond the wheel. An endpoint
that does not answer or a bucket that does not exist fails `check()` within seconds with what to do; a
read or write that fails for such a reason later raises `ObjectStoreUnavailable` (an `OSError`, as a disk
error of the local store is), never `BlobIntegrityError`, which means the blob is missing or damaged.

Clean-up (`trialog objects gc`, through `listing` and `delete_key`): the local store refreshes a blob's
modification time whenever a writer finds it already stored; S3 has no cheap way to touch an object (a copy
onto itself is refused unless its metadata changes), so `contains` refreshes nothing here, and a put (always
a whole PUT) is the only thing that dates an object. The clean-up therefore does not rely on dates for
reuse: it reads the log once more after a settling time and keeps whatever a record written meanwhile
names (`ops.objects_gc`). A bucket lifecycle rule that expires objects by age is not a safe substitute: a
file that every step's snapshot reuses keeps the date it was first written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.store import S3Store

from schemas.blobs import (
    OCTET_STREAM,
    TYPED_FOLDER,
    BlobIntegrityError,
    BlobRef,
    ObjectStoreUnavailable,
    type_folder,
    verified,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

ENDPOINT_ENV = "TRIALOG_S3_ENDPOINT_URL"
DEFAULT_REGION = "us-east-1"
# Bucket names as S3 defines them (3-63 lower-case letters, digits, dots, hyphens; a letter or digit at each
# end): checked before any request, so that a typo is an error about the name, not a 404 from the server.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX_PART = re.compile(r"[A-Za-z0-9._=+-]+")


def check_bucket(bucket: str) -> str:
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ValueError(
            f"{bucket!r} is not an S3 bucket name (3-63 characters: lower-case letters, digits, dots, "
            "hyphens; a letter or digit first and last)"
        )
    return bucket


def check_prefix(prefix: str) -> str:
    """The prefix without its outer slashes; a `ValueError` for empty parts (`a//b`), `.` or `..`, or
    characters that some S3 servers treat differently (spaces, `%`, `?`, `#`, non-ASCII)."""
    parts = prefix.strip("/").split("/") if prefix.strip("/") else []
    for part in parts:
        if part in ("", ".", "..") or not _PREFIX_PART.fullmatch(part):
            raise ValueError(
                f"{prefix!r} is not a key prefix this store accepts: parts of letters, digits and ._=+- "
                "separated by single slashes"
            )
    return "/".join(parts)


@dataclass(frozen=True)
class S3Settings:
    """Where the store is and how to sign: from the environment (`from_env`) or given."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None  # None: AWS itself
    region: str = DEFAULT_REGION
    access_key_id: str = field(default="", repr=False)
    secret_access_key: str = field(default="", repr=False)
    session_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_bucket(self.bucket)
        object.__setattr__(self, "prefix", check_prefix(self.prefix))
        if self.endpoint_url is not None and not re.fullmatch(r"https?://[^/\s]+/?", self.endpoint_url):
            raise ValueError(
                f"{ENDPOINT_ENV}={self.endpoint_url!r} is not an endpoint URL: http(s)://HOST[:PORT], no path"
            )
        if not self.access_key_id or not self.secret_access_key:
            raise ValueError(
                "an S3 object store needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )

    @classmethod
    def from_env(cls, bucket: str, prefix: str = "", env: Mapping[str, str] | None = None) -> S3Settings:
        """The endpoint from `TRIALOG_S3_ENDPOINT_URL` (unset: AWS), credentials and region from the
        standard AWS variables. Credentials are required: without them obstore would ask a cloud metadata
        service for some, which is neither here nor wanted."""
        env = os.environ if env is None else env
        return cls(
            bucket,
            prefix,
            endpoint_url=env.get(ENDPOINT_ENV) or None,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or DEFAULT_REGION,
            access_key_id=env.get("AWS_ACCESS_KEY_ID", ""),
            secret_access_key=env.get("AWS_SECRET_ACCESS_KEY", ""),
            session_token=env.get("AWS_SESSION_TOKEN") or None,
        )

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def where(self) -> str:
        """The location and the server, for messages."""
        return f"{self.url} on {self.endpoint_url or 'AWS'}"


class S3ObjectStore:
    """Blobs as objects of one bucket under one prefix, keyed as the local store's files are."""

    def __init__(self, settings: S3Settings, *, timeout_s: float = 60.0, retry_s: float = 10.0) -> None:
        """`timeout_s` bounds one request (a large blob's upload included); `retry_s` bounds the retries of
        a request that failed for a reason worth retrying (a refused connection, a 5xx, a dropped one), so
        an endpoint that is down is reported after about that long."""
        self.settings = settings
        config: S3Config = {
            "access_key_id": settings.access_key_id,
            "secret_access_key": settings.secret_access_key,
            "region": settings.region,
        }
        if settings.session_token:
            config["session_token"] = settings.session_token
        client: ClientConfig = {
            "connect_timeout": timedelta(seconds=3),
            "timeout": timedelta(seconds=timeout_s),
        }
        if settings.endpoint_url is not None:
            config["endpoint"] = settings.endpoint_url.rstrip("/")
            # A self-hosted server is addressed by path (`http://host:port/bucket/key`): a virtual host
            # (`bucket.host`) needs DNS that a loopback or in-cluster endpoint does not have.
            config["virtual_hosted_style_request"] = False
            client["allow_http"] = settings.endpoint_url.startswith("http://")
        retry: RetryConfig = {
            "max_retries": 4,
            "retry_timeout": timedelta(seconds=retry_s),
            "backoff": {"init_backoff": timedelta(milliseconds=100), "max_backoff": timedelta(seconds=2)},
        }
        prefix = settings.prefix or None
        self._store = S3Store(
            settings.bucket, prefix=prefix, config=config, client_options=client, retry_config=retry
        )
        # `check` asks once with short limits: a command told to use a store that is not there must say so
        # within seconds (the CLI's promise for every service), not after the retries a put deserves.
        probe_client: ClientConfig = {
            **client,
            "connect_timeout": timedelta(seconds=2),
            "timeout": timedelta(seconds=5),
        }
        self._probe = S3Store(
            settings.bucket,
            prefix=prefix,
            config=config,
            client_options=probe_client,
            retry_config={"max_retries": 1, "retry_timeout": timedelta(seconds=3)},
        )

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.settings.where})"

    @staticmethod
    def key_of(sha256: str, media_type: str = OCTET_STREAM) -> str:
        """The key under the prefix: the local store's path under its root."""
        if media_type == OCTET_STREAM:
            return f"{sha256[:2]}/{sha256}"
        return f"{TYPED_FOLDER}/{type_folder(media_type)}/{sha256[:2]}/{sha256}"

    def uri_of(self, ref: BlobRef) -> str:
        prefix = f"{self.settings.prefix}/" if self.settings.prefix else ""
        return f"s3://{self.settings.bucket}/{prefix}{self.key_of(ref.sha256, ref.media_type)}"

    def put(self, data: bytes, media_type: str = OCTET_STREAM) -> BlobRef:
        # One PUT, no HEAD first: S3 makes an object visible only once it is whole, and the key names the
        # content, so writing the same bytes again (two writers at once, a retried request) changes nothing.
        ref = BlobRef.of(data, media_type)
        try:
            obstore.put(
                self._store,
                self.key_of(ref.sha256, media_type),
                data,
                attributes={"Content-Type": media_type},
            )
        except (FileNotFoundError, ObstoreError) as exc:  # a 404 on a PUT: the bucket is not there
            raise self._unavailable("put", ref, exc) from None
        return ref

    def get(self, ref: BlobRef) -> bytes:
        try:
            data = bytes(obstore.get(self._store, self.key_of(ref.sha256, ref.media_type)).bytes())
        except FileNotFoundError as exc:
            if _code(exc) == "NoSuchBucket":  # the store is gone, which says nothing about this blob
                raise self._unavailable("get", ref, exc) from None
            raise BlobIntegrityError(
                f"blob {ref.sha256} ({ref.media_type}) is missing from {self.settings.url}"
            ) from None
        except ObstoreError as exc:
            raise self._unavailable("get", ref, exc) from None
        return verified(ref, data)

    def contains(self, sha256: str, media_type: str = OCTET_STREAM) -> bool:
        """Whether the blob is stored (one HEAD; a HEAD's 404 has no body, so a bucket deleted under a
        running store reads as a missing blob here, and `check` or the next put says why). Unlike the
        local store's, nothing is refreshed: see the module's note on clean-up."""
        try:
            obstore.head(self._store, self.key_of(sha256, media_type))
        except FileNotFoundError:
            return False
        except ObstoreError as exc:
            raise self._unavailable("head", BlobRef(sha256, 0, media_type), exc) from None
        return True

    def listing(self) -> Iterator[tuple[str, int, float]]:
        """Every object under the prefix, in pages: (key under the prefix, size, last-modified time in
        seconds since the epoch). Keys that are not the store's layout are listed too: the caller picks."""
        try:
            for page in obstore.list(self._store, chunk_size=1000):
                for meta in page:
                    yield meta["path"], int(meta["size"]), meta["last_modified"].timestamp()
        except (FileNotFoundError, ObstoreError) as exc:
            raise self._unavailable("list", None, exc) from None

    def delete_key(self, key: str) -> None:
        """Delete one object by its key under the prefix (an object already gone is no error: S3's DELETE
        of a missing key succeeds)."""
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return
        except ObstoreError as exc:
            raise self._unavailable("delete", None, exc) from None

    def check(self) -> None:
        """Return once the endpoint answers and the bucket exists and lets these credentials list it;
        `ObjectStoreUnavailable` saying what to fix otherwise, within seconds. One request: a listing of
        the prefix's top level (the fan-out folders, at most a few hundred names)."""
        try:
            obstore.list_with_delimiter(self._probe)
        except (FileNotFoundError, ObstoreError) as exc:
            raise self._unavailable("list", None, exc) from None

    def _unavailable(self, what: str, ref: BlobRef | None, exc: Exception) -> ObjectStoreUnavailable:
        blob = f" blob {ref.sha256} ({ref.media_type})" if ref is not None else ""
        server = self.settings.endpoint_url or "AWS"
        code = _code(exc)
        if code == "NoSuchBucket" or (what == "list" and isinstance(exc, FileNotFoundError)):
            return ObjectStoreUnavailable(
                f"{what}{blob}: bucket {self.settings.bucket!r} does not exist on {server}",
                f"create it (SeaweedFS: `weed shell`, then `s3.bucket.create -name {self.settings.bucket}`; "
                f"AWS: `aws s3 mb s3://{self.settings.bucket}`), or name another bucket",
            )
        kind = type(exc).__name__
        if kind in ("UnauthenticatedError", "PermissionDeniedError") or code in _AUTH_CODES:
            hint = (
                "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and what the bucket's policy allows them"
            )
        else:
            hint = (
                f"check that the S3 server answers at {ENDPOINT_ENV}={self.settings.endpoint_url or '(AWS)'}"
            )
        return ObjectStoreUnavailable(f"{what}{blob} on {self.settings.where} failed: {_summary(exc)}", hint)


_AUTH_CODES = {"AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId", "ExpiredToken"}


def _code(exc: Exception) -> str | None:
    """The S3 error code in the server's XML answer, which obstore's message carries."""
    found = re.search(r"<Code>([^<]+)</Code>", str(exc))
    return found.group(1) if found else None


def _summary(exc: Exception) -> str:
    """obstore's message without its debug dump and the raw XML: one line."""
    head = str(exc).split("Debug source:", 1)[0]
    head = re.sub(r"\s+", " ", re.sub(r"<\?xml.*", "", head, flags=re.S)).strip().rstrip(":")
    code = _code(exc)
    return f"{type(exc).__name__}: {head[:400]}" + (f" ({code})" if code else "")
