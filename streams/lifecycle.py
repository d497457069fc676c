"""How a worker process lives and ends, for an orchestrator (Kubernetes, compose): its liveness and
readiness, served for probes, and the grace period of a graceful stop.

* Liveness (`GET /healthz`): every loop that beats has beaten within the allowance of its last beat. A
  loop beats each time it turns (a poll, a timer tick); before something long (a sandbox step, a grade, a
  training step) it beats with a longer allowance, the longest that work may take. A loop stuck in a hung
  call or a deadlock stops beating and the probe fails, so the orchestrator restarts the process. Before any
  loop has beaten the process is starting (loading a model, waiting for Kafka) and counts as alive: waiting
  is not a fault a restart would mend.
* Readiness (`GET /readyz`): every part that reports readiness says ready (connected to Kafka and
  subscribed, the tables recovered, the checkpoint resumed). Before any part reports, and once a stop has
  begun, the process is not ready.
* Both answer 200 or 503 with a JSON body saying which loop or part is behind.
* `Grace`: once a stop is asked for (SIGTERM), the process has `grace_s` to finish or hand back its work;
  after that it exits at once. A worker commits a request's offset only after answering it, so what it
  leaves unfinished is not committed, and Kafka redelivers it to another member of the group.

Only the standard library: the floor every worker kind shares (the streams worker, the stateless request
workers, the scheduler, the guard, the learner).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

# A loop that has not turned for this long is taken for stuck (a worker's `--liveness-s`). Generous: an
# orchestrator restarting a slow but healthy worker loses its work in flight, which is worse than noticing
# a hung one a few minutes late.
DEFAULT_LIVENESS_S = 300.0
# Below Kubernetes' default terminationGracePeriodSeconds (30), which ends in SIGKILL: the worker exits on
# its own first, having left its group (its partitions move at once instead of after a session timeout).
DEFAULT_GRACE_S = 25.0
HEALTH_PATHS = ("/healthz", "/readyz")


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer of one probe: whether it passes, and each loop's or part's state in words."""

    ok: bool
    detail: dict[str, str]

    def body(self) -> bytes:
        return json.dumps({"ok": self.ok, **self.detail}, sort_keys=True).encode()


class Health:
    """The liveness and readiness of one process, fed by its loops (any thread), read by `HealthServer`."""

    def __init__(
        self, liveness_s: float = DEFAULT_LIVENESS_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.liveness_s = liveness_s
        self.clock = clock
        self._lock = threading.Lock()
        self._beats: dict[str, tuple[float, float]] = {}  # loop -> (its last beat, the allowance it gave)
        self._ready: dict[str, tuple[bool, str]] = {}  # part -> (ready, why not)
        self._stopping = False

    def beat(self, loop: str = "main", within_s: float | None = None) -> None:
        """`loop` turned; it will beat again within `within_s` (default: the process's liveness bound)."""
        allowance = self.liveness_s if within_s is None else max(within_s, self.liveness_s)
        now = self.clock()
        with self._lock:
            self._beats[loop] = (now, allowance)

    def ready(self, part: str, ready: bool = True, why_not: str = "") -> None:
        """Whether `part` (e.g. a consumer's topic) can take work now; `why_not` says what it waits for."""
        with self._lock:
            self._ready[part] = (ready, "" if ready else why_not or "not ready")

    def stopping(self) -> None:
        """A stop has begun: no new work, so never ready again."""
        with self._lock:
            self._stopping = True

    def liveness(self) -> Verdict:
        now = self.clock()
        with self._lock:
            beats = dict(self._beats)
        detail = {loop: self._state(now - last, allowance) for loop, (last, allowance) in beats.items()}
        late = any(now - last > allowance for last, allowance in beats.values())
        return Verdict(not late, detail or {"process": "starting"})

    def _state(self, since: float, allowance: float) -> str:
        if since > allowance:
            return f"no beat for {since:.0f} s"
        if allowance > self.liveness_s:  # beat with a longer allowance: a request or step in hand
            return f"working (for {since:.0f} s, up to {allowance:.0f} s)"
        return "turning"

    def readiness(self) -> Verdict:
        with self._lock:
            parts = dict(self._ready)
            stopping = self._stopping
        if stopping:
            return Verdict(False, {"process": "stopping"})
        if not parts:
            return Verdict(False, {"process": "starting"})
        detail = {part: "ready" if ready else why for part, (ready, why) in parts.items()}
        return Verdict(all(ready for ready, _ in parts.values()), detail)


class HealthServer:
    """`GET /healthz` and `GET /readyz` of `health` on `host:port` (0: a free port, see `.port`), in a
    thread of its own, so that a busy or stuck loop never delays the answer."""

    def __init__(self, health: Health, host: str = "127.0.0.1", port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer((host, port), _handler(health))
        self.httpd.daemon_threads = True
        self.host = host
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="health-http", daemon=True)

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path not in HEALTH_PATHS:
                self.send_error(404, "health is at /healthz (liveness) and /readyz (readiness)")
                return
            verdict = health.liveness() if path == "/healthz" else health.readiness()
            body = verdict.body()
            self.send_response(200 if verdict.ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a probe every few seconds would flood the worker's log

    return Handler


class Grace:
    """The grace period of a graceful stop: `start()` (on SIGTERM) arms a timer that ends the process with
    `exit_code` after `grace_s`, unless it exits first. Its unfinished work was never committed, so Kafka
    hands it to another worker. `exit` is `os._exit`: no clean-up may block the exit past the period."""

    def __init__(
        self,
        grace_s: float = DEFAULT_GRACE_S,
        exit_code: int = 0,
        exit: Callable[[int], Any] = os._exit,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.grace_s = grace_s
        self.exit_code = exit_code
        self._exit = exit
        self._say = say or log.warning
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        """Arm the timer (once: a second signal does not extend the period)."""
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.grace_s, self._expire)
            self._timer.name = "grace-period"
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        self._say(
            f"still running {self.grace_s:g} s after the stop was asked for: exiting now; work not "
            "finished was not committed and will be redelivered"
        )
        self._exit(self.exit_code)
