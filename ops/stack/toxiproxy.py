"""Toxiproxy, the TCP proxy the fault tests put between clients and brokers to inject network faults on
loopback (latency, a link cut off and healed): built from its Go module into the cache, run on a free
127.0.0.1 port, driven over its HTTP API by `ToxiproxyClient`.

Built like Jaeger and SeaweedFS, from a small tool module (`ops/toxiproxy/go.mod`, `go.sum`) that pins it
and every dependency. The Go module proxy's version list stops at v2.5.0, but later tags resolve when asked
for by version: v2.12.0 is the newest it serves (newer ones answer "not available").
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ops import process
from ops.paths import REPO_ROOT, Paths
from ops.stack import go_tools
from streams.errors import StackError

MODULE = "github.com/Shopify/toxiproxy/v2"
PACKAGE = f"{MODULE}/cmd/server"
TOOL_MODULE_DIR = REPO_ROOT / "ops" / "toxiproxy"  # go.mod/go.sum pin every dependency of the build
START_TIMEOUT_S = 30.0  # seen: well under 1 s; a loaded 2-core machine may take longer to exec a binary

Stream = Literal["upstream", "downstream"]
# Toxiproxy's names: `downstream` is what the upstream server sends back to the client, `upstream` the
# client's requests; a fault on a link usually hits both.
BOTH: tuple[Stream, Stream] = ("upstream", "downstream")


def version() -> str:
    """The Toxiproxy version the tool module pins."""
    return go_tools.pinned_version(TOOL_MODULE_DIR, MODULE)


def binary(paths: Paths) -> Path:
    """Build `toxiproxy-server` once with `go build` against the pinned tool module; later calls reuse it."""
    # The server reports the version it was stamped with (`/version`, its log), "git" when not stamped.
    stamp = ["-ldflags", f"-X {MODULE}.Version={version()}"]
    return go_tools.build(
        paths, f"Toxiproxy {version()}", f"toxiproxy-server-{version()}", TOOL_MODULE_DIR, PACKAGE, stamp
    )


class ToxiproxyError(StackError):
    """A request to Toxiproxy's API failed: what was asked, and what the server (or the network) said."""


@dataclass(frozen=True)
class Proxy:
    """One proxy as the server describes it: `listen` and `upstream` are host:port addresses."""

    name: str
    listen: str
    upstream: str
    enabled: bool

    @property
    def port(self) -> int:
        """The port it listens on (the server's choice when it was created with port 0)."""
        return int(self.listen.rsplit(":", 1)[1])

    @classmethod
    def of(cls, data: Any) -> Proxy:
        return cls(str(data["name"]), str(data["listen"]), str(data["upstream"]), bool(data["enabled"]))


@dataclass(frozen=True)
class Toxic:
    """One toxic on a proxy: `attributes` are the type's own (latency's `latency` and `jitter`, in ms)."""

    name: str
    type: str
    stream: Stream
    toxicity: float
    attributes: dict[str, Any]

    @classmethod
    def of(cls, data: Any) -> Toxic:
        stream = data["stream"]
        if stream not in BOTH:
            raise ToxiproxyError(f"Toxiproxy described a toxic with an unknown stream {stream!r}: {data}")
        return cls(
            str(data["name"]), str(data["type"]), stream, float(data["toxicity"]), dict(data["attributes"])
        )


def address(where: int | str) -> str:
    """`where` as a host:port address: a bare port is on 127.0.0.1 (tests talk to loopback only)."""
    return f"127.0.0.1:{where}" if isinstance(where, int) else where


@dataclass(frozen=True)
class ApiRequest:
    """One call of Toxiproxy's HTTP API, before it is sent: what `ToxiproxyClient` builds and unit tests
    check."""

    method: str
    path: str
    body: dict[str, Any] | None = None

    def build(self, url: str) -> urllib.request.Request:
        data = None if self.body is None else json.dumps(self.body).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        return urllib.request.Request(f"{url}{self.path}", data=data, method=self.method, headers=headers)


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


class ToxiproxyClient:
    """Toxiproxy's HTTP API at `url` (http://127.0.0.1:PORT). Every call raises `ToxiproxyError` naming the
    request and the server's answer when it fails."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    # Requests, built apart from sending them so that they can be checked without a server.

    @staticmethod
    def create_request(name: str, listen: int | str, upstream: int | str, enabled: bool = True) -> ApiRequest:
        body = {"name": name, "listen": address(listen), "upstream": address(upstream), "enabled": enabled}
        return ApiRequest("POST", "/proxies", body)

    @staticmethod
    def enabled_request(name: str, enabled: bool) -> ApiRequest:
        # PATCH: the server logs POST on a proxy as deprecated.
        return ApiRequest("PATCH", f"/proxies/{_quoted(name)}", {"enabled": enabled})

    @staticmethod
    def toxic_request(
        proxy: str,
        name: str,
        type: str,
        attributes: dict[str, Any],
        stream: Stream = "downstream",
        toxicity: float = 1.0,
    ) -> ApiRequest:
        if stream not in BOTH:
            raise ToxiproxyError(f"a toxic's stream is 'upstream' or 'downstream', not {stream!r}")
        if not 0.0 <= toxicity <= 1.0:
            raise ToxiproxyError(f"a toxic's toxicity is a probability in [0, 1], not {toxicity}")
        body = {"name": name, "type": type, "stream": stream, "toxicity": toxicity, "attributes": attributes}
        return ApiRequest("POST", f"/proxies/{_quoted(proxy)}/toxics", body)

    # Calls.

    def call(self, request: ApiRequest) -> Any:
        """Send `request`; its JSON answer (None when empty)."""
        what = f"Toxiproxy {request.method} {request.path}"
        try:
            with urllib.request.urlopen(request.build(self.url), timeout=self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ToxiproxyError(f"{what} failed: HTTP {exc.code}: {_error_text(exc)}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ToxiproxyError(
                f"{what}: no answer from {self.url} ({exc})",
                "is the server running? (ops.testing.ToxiproxyProcess)",
            ) from exc
        try:
            return json.loads(text) if text.strip() else None
        except ValueError as exc:
            raise ToxiproxyError(f"{what} answered with something other than JSON: {text[:300]!r}") from exc

    def version(self) -> str:
        """The version the server was built as (`binary` stamps it)."""
        answer = self.call(ApiRequest("GET", "/version"))
        if not isinstance(answer, dict) or "version" not in answer:
            raise ToxiproxyError(f"Toxiproxy GET /version answered {answer!r}, not {{'version': ...}}")
        return str(answer["version"])

    def create_proxy(self, name: str, listen: int | str, upstream: int | str, enabled: bool = True) -> Proxy:
        """A proxy forwarding what connects to `listen` (port 0: any free one, see `Proxy.port`) to
        `upstream`; a bare port means 127.0.0.1."""
        return Proxy.of(self.call(self.create_request(name, listen, upstream, enabled)))

    def proxies(self) -> dict[str, Proxy]:
        answer = self.call(ApiRequest("GET", "/proxies"))
        return {name: Proxy.of(data) for name, data in dict(answer).items()}

    def proxy(self, name: str) -> Proxy:
        return Proxy.of(self.call(ApiRequest("GET", f"/proxies/{_quoted(name)}")))

    def set_enabled(self, name: str, enabled: bool) -> Proxy:
        """Disabled, a proxy closes its listener and every connection through it (a client sees the link
        reset and then refused); enabled again, it listens on the same address."""
        return Proxy.of(self.call(self.enabled_request(name, enabled)))

    def cut(self, name: str) -> Proxy:
        return self.set_enabled(name, False)

    def heal(self, name: str) -> Proxy:
        return self.set_enabled(name, True)

    def delete_proxy(self, name: str) -> None:
        self.call(ApiRequest("DELETE", f"/proxies/{_quoted(name)}"))

    def add_toxic(
        self,
        proxy: str,
        name: str,
        type: str,
        attributes: dict[str, Any],
        stream: Stream = "downstream",
        toxicity: float = 1.0,
    ) -> Toxic:
        """Any of Toxiproxy's toxics (latency, bandwidth, slow_close, timeout, reset_peer, slicer,
        limit_data) on one direction of `proxy`."""
        return Toxic.of(self.call(self.toxic_request(proxy, name, type, attributes, stream, toxicity)))

    def toxics(self, proxy: str) -> list[Toxic]:
        return [Toxic.of(data) for data in self.call(ApiRequest("GET", f"/proxies/{_quoted(proxy)}/toxics"))]

    def remove_toxic(self, proxy: str, name: str) -> None:
        self.call(ApiRequest("DELETE", f"/proxies/{_quoted(proxy)}/toxics/{_quoted(name)}"))

    def add_latency(
        self,
        proxy: str,
        latency_ms: int,
        jitter_ms: int = 0,
        streams: tuple[Stream, ...] = BOTH,
        name: str = "latency",
    ) -> list[Toxic]:
        """Delay every chunk by `latency_ms` +/- `jitter_ms` in each of `streams` (both by default: a round
        trip then takes at least twice `latency_ms`); the toxics are named `<name>_<stream>`."""
        if latency_ms < 0 or jitter_ms < 0:
            raise ToxiproxyError(f"latency and jitter are >= 0 ms, not {latency_ms} and {jitter_ms}")
        attributes = {"latency": latency_ms, "jitter": jitter_ms}
        return [
            self.add_toxic(proxy, f"{name}_{stream}", "latency", attributes, stream) for stream in streams
        ]

    def remove_latency(self, proxy: str, name: str = "latency") -> None:
        """Remove what `add_latency(proxy, ..., name=name)` added, in whichever streams it did."""
        for toxic in self.toxics(proxy):
            if toxic.name in {f"{name}_{stream}" for stream in BOTH}:
                self.remove_toxic(proxy, toxic.name)

    def reset(self) -> None:
        """Enable every proxy and remove every toxic (the proxies themselves stay)."""
        self.call(ApiRequest("POST", "/reset"))


def _error_text(exc: urllib.error.HTTPError) -> str:
    """The server's `{"error": ..., "status": ...}` message, else its raw answer."""
    try:
        raw = exc.read().decode(errors="replace")
    except OSError:
        return str(exc.reason)
    try:
        return str(json.loads(raw)["error"])
    except (ValueError, KeyError, TypeError):
        return raw.strip()[:300] or str(exc.reason)


@dataclass
class ToxiproxyServer:
    """A `toxiproxy-server` this process started on 127.0.0.1:`port`, its pid file and log under `home`."""

    home: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "toxiproxy.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "toxiproxy.log"

    def client(self, timeout_s: float = 10.0) -> ToxiproxyClient:
        return ToxiproxyClient(self.url, timeout_s)

    def stop(self) -> None:
        # Its proxies hold no state worth an orderly shutdown.
        process.stop(self.pid_file, grace_s=2.0)


def start(paths: Paths, home: Path, port: int) -> ToxiproxyServer:
    """Start the server with its API on 127.0.0.1:`port` and return once the API answers; a `StackError`
    with the log's last lines otherwise."""
    if process.port_open(port):
        raise StackError(f"port 127.0.0.1:{port} is already taken by another program", "retry")
    home.mkdir(parents=True, exist_ok=True)
    server = ToxiproxyServer(home, port)
    argv = [str(binary(paths)), "-host", "127.0.0.1", "-port", str(port)]
    process.start_detached(argv, pid_file=server.pid_file, log_file=server.log_file)
    client = server.client(timeout_s=2.0)
    if not process.wait_until(lambda: _answers(client), timeout_s=START_TIMEOUT_S):
        server.stop()
        raise StackError(
            f"Toxiproxy did not answer on {server.url} within {START_TIMEOUT_S:.0f} s; last log lines:\n"
            f"{process.log_tail(server.log_file)}",
            f"see {server.log_file}",
        )
    return server


def _answers(client: ToxiproxyClient) -> bool:
    try:
        client.version()
    except ToxiproxyError:
        return False
    return True
