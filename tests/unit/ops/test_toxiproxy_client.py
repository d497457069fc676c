"""The Toxiproxy client's requests, and its errors, against a scripted HTTP server on loopback (the real
server is exercised by tests/integration/cluster/test_toxiproxy.py)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ops.stack.toxiproxy import ApiRequest, ToxiproxyClient, ToxiproxyError


def test_a_proxy_is_created_on_loopback_and_enabled_by_default() -> None:
    request = ToxiproxyClient.create_request("kafka-1", 0, 19092)
    assert (request.method, request.path) == ("POST", "/proxies")
    assert request.body == {
        "name": "kafka-1", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:19092", "enabled": True,
    }  # fmt: skip
    assert ToxiproxyClient.create_request("x", "127.0.0.2:1", "127.0.0.3:2").body == {
        "name": "x", "listen": "127.0.0.2:1", "upstream": "127.0.0.3:2", "enabled": True,
    }  # fmt: skip


def test_cutting_off_and_healing_patch_the_proxy_named_in_the_path() -> None:
    request = ToxiproxyClient.enabled_request("a b/c", False)
    assert (request.method, request.path, request.body) == ("PATCH", "/proxies/a%20b%2Fc", {"enabled": False})
    built = request.build("http://127.0.0.1:8474")
    assert built.full_url == "http://127.0.0.1:8474/proxies/a%20b%2Fc"
    assert built.get_method() == "PATCH"
    assert built.get_header("Content-type") == "application/json"
    assert json.loads(built.data) == {"enabled": False}  # type: ignore[arg-type]


def test_a_toxic_names_its_stream_and_toxicity_and_refuses_nonsense() -> None:
    request = ToxiproxyClient.toxic_request("p", "slow", "latency", {"latency": 100, "jitter": 5}, "upstream")
    assert (request.method, request.path) == ("POST", "/proxies/p/toxics")
    assert request.body == {
        "name": "slow", "type": "latency", "stream": "upstream", "toxicity": 1.0,
        "attributes": {"latency": 100, "jitter": 5},
    }  # fmt: skip
    with pytest.raises(ToxiproxyError, match="'sideways'"):
        ToxiproxyClient.toxic_request("p", "t", "latency", {}, "sideways")  # type: ignore[arg-type]
    with pytest.raises(ToxiproxyError, match="probability"):
        ToxiproxyClient.toxic_request("p", "t", "latency", {}, toxicity=1.5)


def test_a_get_sends_no_body() -> None:
    built = ApiRequest("GET", "/proxies").build("http://127.0.0.1:1")
    assert built.data is None and built.get_method() == "GET"


@dataclass
class Scripted:
    """A loopback HTTP server answering `answers[(method, path)]` (status, JSON body; 404 otherwise) and
    recording every request in `seen`."""

    url: str = ""
    answers: dict[tuple[str, str], tuple[int, Any]] = field(default_factory=dict)
    seen: list[tuple[str, str, Any]] = field(default_factory=list)

    def client(self) -> ToxiproxyClient:
        return ToxiproxyClient(self.url, timeout_s=5)


@pytest.fixture
def scripted() -> Iterator[Scripted]:
    script = Scripted()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            script.seen.append((self.command, self.path, body))
            status, answer = script.answers.get(
                (self.command, self.path), (404, {"error": "proxy not found"})
            )
            data = b"" if answer is None else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test's output is not the place for an access log

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    script.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield script
    finally:
        server.shutdown()
        server.server_close()


def test_the_servers_error_is_in_the_message(scripted: Scripted) -> None:
    scripted.answers[("POST", "/proxies")] = (409, {"error": "proxy already exists", "status": 409})
    with pytest.raises(ToxiproxyError, match=r"POST /proxies failed: HTTP 409: proxy already exists"):
        scripted.client().create_proxy("p", 0, 1)
    with pytest.raises(ToxiproxyError, match=r"PATCH /proxies/gone failed: HTTP 404: proxy not found"):
        scripted.client().cut("gone")


def test_no_server_is_an_error_that_says_where_it_was_looked_for(closed_port: Callable[[], int]) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ToxiproxyError, match=f"no answer from {url}") as raised:
        ToxiproxyClient(url, timeout_s=2).reset()
    assert "ToxiproxyProcess" in raised.value.hint


def test_latency_goes_both_ways_by_default_and_is_removed_by_name(scripted: Scripted) -> None:
    def toxic(stream: str) -> dict[str, Any]:
        return {
            "name": f"latency_{stream}", "type": "latency", "stream": stream, "toxicity": 1.0,
            "attributes": {"latency": 200, "jitter": 10},
        }  # fmt: skip

    scripted.answers[("POST", "/proxies/p/toxics")] = (200, toxic("upstream"))
    scripted.answers[("GET", "/proxies/p/toxics")] = (
        200,
        [toxic("upstream"), toxic("downstream"), {**toxic("upstream"), "name": "other"}],
    )
    scripted.answers[("DELETE", "/proxies/p/toxics/latency_upstream")] = (204, None)
    scripted.answers[("DELETE", "/proxies/p/toxics/latency_downstream")] = (204, None)
    client = scripted.client()
    made = client.add_latency("p", 200, jitter_ms=10)
    assert [t.attributes for t in made] == [{"latency": 200, "jitter": 10}] * 2
    posted = [body for method, _, body in scripted.seen if method == "POST"]
    assert [(b["name"], b["stream"], b["attributes"]) for b in posted] == [
        ("latency_upstream", "upstream", {"latency": 200, "jitter": 10}),
        ("latency_downstream", "downstream", {"latency": 200, "jitter": 10}),
    ]
    client.add_latency("p", 50, streams=("downstream",))
    assert scripted.seen[-1][2]["stream"] == "downstream"
    scripted.seen.clear()
    client.remove_latency("p")
    assert [(m, p) for m, p, _ in scripted.seen] == [
        ("GET", "/proxies/p/toxics"),
        ("DELETE", "/proxies/p/toxics/latency_upstream"),
        ("DELETE", "/proxies/p/toxics/latency_downstream"),
    ]
    with pytest.raises(ToxiproxyError, match=">= 0 ms"):
        client.add_latency("p", -1)
