"""SeaweedFS, the S3 server the S3 object store is tested against: built from its Go module into the cache,
run as one `weed server` (master, volume, filer and S3 gateway in one process) on loopback only.

SeaweedFS is under the Apache licence (MinIO, the usual choice, is under the AGPL: not usable here). Its
module has a `replace` directive, which `go install MODULE@VERSION` refuses, so it is built like Jaeger:
from a small tool module (`ops/seaweedfs/go.mod`, `go.sum`) that pins it and every dependency.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ops import process
from ops.paths import REPO_ROOT, Paths
from ops.stack import go_tools
from streams.errors import StackError

MODULE = "github.com/seaweedfs/seaweedfs"
PACKAGE = f"{MODULE}/weed"
TOOL_MODULE_DIR = REPO_ROOT / "ops" / "seaweedfs"  # go.mod/go.sum pin every dependency of the build
START_TIMEOUT_S = 90.0  # seen: ~2 s on an idle 2-core machine; more under a loaded test session
START_ATTEMPTS = 3  # `start_on_free_ports`: a port taken between choosing and binding it, again and again
STOP_GRACE_S = 1.0  # a test server's data is thrown away: no need to wait for its orderly shutdown (~15 s)


def version() -> str:
    """The SeaweedFS version the tool module pins (a pseudo-version: the module proxy lists no release)."""
    return go_tools.pinned_version(TOOL_MODULE_DIR, MODULE)


def binary(paths: Paths) -> Path:
    """Build `weed` once with `go build` against the pinned tool module (minutes: SeaweedFS is large);
    later calls reuse it."""
    return go_tools.build(paths, f"SeaweedFS {version()}", f"weed-{version()}", TOOL_MODULE_DIR, PACKAGE)


@dataclass(frozen=True)
class SeaweedPorts:
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    s3: int
    s3_grpc: int

    @classmethod
    def free(cls) -> SeaweedPorts:
        return cls(*process.free_ports(8))

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.s3}"

    def all(self) -> tuple[int, ...]:
        return (
            self.master, self.master_grpc, self.volume, self.volume_grpc,
            self.filer, self.filer_grpc, self.s3, self.s3_grpc,
        )  # fmt: skip


@dataclass(frozen=True)
class S3Identity:
    """The one identity the server accepts (S3 signature v4); any other request is refused."""

    access_key_id: str = field(default_factory=lambda: "trialog" + secrets.token_hex(6))
    secret_access_key: str = field(default_factory=lambda: secrets.token_hex(20), repr=False)

    def config(self) -> dict[str, object]:
        """SeaweedFS's `-s3.config` identities file."""
        credentials = [{"accessKey": self.access_key_id, "secretKey": self.secret_access_key}]
        actions = ["Admin", "Read", "Write", "List", "Tagging"]
        return {"identities": [{"name": "trialog", "credentials": credentials, "actions": actions}]}


def server_argv(weed: Path, home: Path, ports: SeaweedPorts) -> list[str]:
    """`weed server` with every listener on 127.0.0.1 at the given ports, extras off, data under `home`."""
    return [
        str(weed), "server", f"-dir={home / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={ports.master}", f"-master.port.grpc={ports.master_grpc}",
        f"-volume.port={ports.volume}", f"-volume.port.grpc={ports.volume_grpc}",
        "-filer", f"-filer.port={ports.filer}", f"-filer.port.grpc={ports.filer_grpc}",
        f"-filer.localSocket={home / 'filer.sock'}",
        "-s3", f"-s3.port={ports.s3}", f"-s3.port.grpc={ports.s3_grpc}", f"-s3.config={home / 's3.json'}",
        f"-s3.localSocket={home / 's3.sock'}",
        # A bucket exists only once created, as on AWS: an upload to a missing one must fail, not make it.
        "-s3.autoCreateBucket=false",
        # The Iceberg and Lance catalogues and the IAM API would each open one more port.
        "-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
        # Small volumes: a test server holds megabytes, and each volume file grows up to this limit.
        "-master.volumeSizeLimitMB=64", "-volume.max=16", "-volume.preStopSeconds=0",
    ]  # fmt: skip


@dataclass
class SeaweedServer:
    """A `weed server` this process started, with its S3 endpoint and the identity it accepts."""

    home: Path
    ports: SeaweedPorts
    identity: S3Identity
    weed: Path

    @property
    def endpoint_url(self) -> str:
        return self.ports.endpoint_url

    @property
    def pid_file(self) -> Path:
        return self.home / "weed.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "weed.log"

    def env(self) -> dict[str, str]:
        """What a trialog process needs to use this server's buckets (`schemas.s3_store`)."""
        return {
            "TRIALOG_S3_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.identity.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.identity.secret_access_key,
            "AWS_REGION": "us-east-1",
        }

    def create_bucket(self, name: str, timeout_s: float = 30.0) -> None:
        """Create `name` with the server's own shell (S3's CreateBucket would need a signing client)."""
        shell = [
            str(self.weed), "shell", f"-master=127.0.0.1:{self.ports.master}.{self.ports.master_grpc}",
            f"-filer=127.0.0.1:{self.ports.filer}.{self.ports.filer_grpc}",
        ]  # fmt: skip
        result = subprocess.run(
            shell, input=f"s3.bucket.create -name {name}\n", capture_output=True, text=True,
            timeout=timeout_s, check=False,
        )  # fmt: skip
        if f"created bucket {name}" not in result.stdout:
            raise StackError(
                f"SeaweedFS did not create bucket {name}: {(result.stdout + result.stderr).strip()[-800:]}",
                f"see {self.log_file}",
            )

    def stop(self) -> None:
        process.stop(self.pid_file, grace_s=STOP_GRACE_S)
        # Its gRPC listeners also bind sockets named by port in /tmp, and a killed server leaves them.
        for port in self.ports.all():
            for kind in ("master", "volume", "filer", "s3"):
                with contextlib.suppress(OSError):
                    Path(f"/tmp/seaweedfs-{kind}-grpc-{port}.sock").unlink()


class SeaweedExited(StackError):
    """The server did not start, or its process ended before it was ready (the log says why).

    `lost_a_port`: because one of its ports was taken. Free ports are only free when chosen, and another
    program (any outgoing connection's ephemeral port) may take one before the server binds it (seen in CI:
    the volume server's `startClusterHttpService` failed, the whole `weed server` exited)."""

    def __init__(self, message: str, hint: str, *, lost_a_port: bool) -> None:
        super().__init__(message, hint)
        self.lost_a_port = lost_a_port


def start_on_free_ports(
    paths: Paths, home: Path, bucket: str, attempts: int = START_ATTEMPTS
) -> SeaweedServer:
    """`start` on free ports, again on other free ports (and a fresh `home`) while a port it was given is
    taken before the server binds it."""
    for attempt in range(1, attempts + 1):
        try:
            return start(paths, home, SeaweedPorts.free(), bucket)
        except SeaweedExited as exc:
            if not exc.lost_a_port or attempt == attempts:
                raise
            shutil.rmtree(home, ignore_errors=True)
    raise AssertionError("unreachable: the last attempt returns or raises")


def start(paths: Paths, home: Path, ports: SeaweedPorts, bucket: str) -> SeaweedServer:
    """Start a server with its data under `home`, create `bucket`, and return once an object can be put
    and read back through the S3 API; a `StackError` with the log's last lines otherwise (`SeaweedExited`
    as soon as the server process ends)."""
    for port in ports.all():
        if process.port_open(port):
            raise SeaweedExited(
                f"port 127.0.0.1:{port} is already taken by another program", "retry", lost_a_port=True
            )
    (home / "data").mkdir(parents=True, exist_ok=True)
    identity = S3Identity()
    config = home / "s3.json"
    config.write_text(json.dumps(identity.config()))
    config.chmod(0o600)
    server = SeaweedServer(home, ports, identity, binary(paths))
    process.start_detached(
        server_argv(server.weed, home, ports), pid_file=server.pid_file, log_file=server.log_file
    )
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        _wait(lambda: _answers(ports.s3), deadline, server, "its S3 port to answer")
        _wait(lambda: _try(lambda: server.create_bucket(bucket)), deadline, server, f"bucket {bucket}")
        _wait(lambda: _round_trip(server, bucket), deadline, server, "a put and get to succeed")
    except BaseException:
        server.stop()
        raise
    return server


def _wait(ready: Callable[[], bool], deadline: float, server: SeaweedServer, what: str) -> None:
    """Until `ready`; fails at once when the server process has ended (it does not come back by itself)."""
    while not ready():
        if process.running_pid(server.pid_file) is None:
            fatal = _fatal_lines(server.log_file)
            raise SeaweedExited(
                f"SeaweedFS exited before it got ready ({what}); its log:\n{fatal}",
                f"see {server.log_file}",
                lost_a_port="address already in use" in fatal,
            )
        if time.monotonic() >= deadline:
            raise StackError(
                f"SeaweedFS did not get ready ({what}) within {START_TIMEOUT_S:.0f} s; last log lines:\n"
                f"{process.log_tail(server.log_file)}",
                f"see {server.log_file}",
            )
        time.sleep(0.3)


def _fatal_lines(log_file: Path) -> str:
    """The log's fatal lines (`F` in glog's first column), else its tail: a fatal error is followed by
    every goroutine's stack, so the tail alone hides the reason (as it did in CI)."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    fatal = [line for line in lines if line[:1] == "F" and line[1:5].isdigit()]
    return "\n".join(fatal[-5:]) if fatal else process.log_tail(log_file)


def _answers(port: int) -> bool:
    """Whether anything answers HTTP on the S3 port (an unsigned request is refused: that is an answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def _try(action: Callable[[], None]) -> bool:
    try:
        action()
    except (StackError, subprocess.TimeoutExpired):
        return False
    return True


def _round_trip(server: SeaweedServer, bucket: str) -> bool:
    """A blob put and read back under `readiness/`: the volume server has registered and takes writes."""
    from schemas.blobs import ObjectStoreUnavailable
    from schemas.object_stores import StoreLocation, open_object_store

    store = open_object_store(StoreLocation(bucket=bucket, prefix="readiness"), server.env())
    try:
        return store.get(store.put(b"ready")) == b"ready"
    except ObjectStoreUnavailable:
        return False


def remove(server: SeaweedServer) -> None:
    """Stop the server and delete its data."""
    server.stop()
    shutil.rmtree(server.home, ignore_errors=True)
