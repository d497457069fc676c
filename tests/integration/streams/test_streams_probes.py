"""A real `trialog worker streams` process behind its probes: ready once its tables are settled, alive
while its timer ticks, not ready as soon as SIGTERM arrives (Faust's own stop, with the grace period armed
beside it), and exit 0 once stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from ops.paths import REPO_ROOT
from ops.process import free_port, wait_until
from tests.integration.actors.kafka_helpers import new_run
from tests.integration.probes import probe


def test_a_streams_worker_serves_its_probes_and_stops_on_sigterm(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = new_run(kafka_bootstrap, "probes")
    port = free_port()
    log = tmp_path / "streams.log"
    command = [
        sys.executable, "-m", "ops.cli", "worker", "streams", "--bootstrap", kafka_bootstrap, "--run", run,
        "--data-dir", str(tmp_path / "data"), "--instance", "probes-1", "--health-port", str(port),
        "--grace-s", "90",
    ]  # fmt: skip
    with log.open("wb") as out:
        worker = subprocess.Popen(command, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: probe(port, "/readyz")[0] == 200, timeout_s=120), log.read_text()[-3000:]
        ready = probe(port, "/readyz")[1]
        assert ready.get("ok") is True and ready.get("episodes") == "ready", ready
        # Alive: its tick timer turns (a loaded machine may make one tick late, never stop them all).
        assert wait_until(lambda: probe(port, "/healthz") == (200, {"ok": True, "episode-ticks": "turning"}),
                          timeout_s=30), probe(port, "/healthz")  # fmt: skip
        worker.send_signal(signal.SIGTERM)
        assert wait_until(lambda: probe(port, "/readyz")[1].get("process") == "stopping", timeout_s=30)
        assert worker.wait(timeout=120) == 0, log.read_text()[-3000:]
        assert "will be redelivered" not in log.read_text()  # it stopped on its own, not by the grace period
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
