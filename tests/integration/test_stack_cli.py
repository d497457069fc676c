"""`trialog up | status --json | down` on a stack of its own (own home, free ports, the shared engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker

from ops.paths import REPO_ROOT
from ops.process import free_port


def _trialog(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ops.cli", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_up_status_down(tmp_path: Path, docker_client: docker.DockerClient) -> None:
    env = {
        **os.environ,
        "TRIALOG_HOME": str(tmp_path / "home"),
        "TRIALOG_KAFKA_PORT": str(free_port()),
        "TRIALOG_KAFKA_CONTROLLER_PORT": str(free_port()),
        **{
            f"TRIALOG_JAEGER_{name}_PORT": str(free_port())
            for name in ("OTLP_GRPC", "OTLP_HTTP", "QUERY", "QUERY_GRPC", "HEALTH", "METRICS")
        },
    }
    try:
        up = _trialog(env, "up")
        assert up.returncode == 0, up.stderr
        # Every step says how long it took.
        assert "ok Kafka broker on 127.0.0.1:" in up.stderr
        assert " s)" in up.stderr

        status = _trialog(env, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        report = json.loads(status.stdout)
        assert report["healthy"] is True
        components = report["components"]
        assert set(components) == {"docker", "kafka", "jaeger"}
        assert components["kafka"]["endpoint"] == f"127.0.0.1:{env['TRIALOG_KAFKA_PORT']}"
        assert all(c["healthy"] for c in components.values())

        # A second `up` finds everything running and built: nothing is redone.
        again = _trialog(env, "up")
        assert again.returncode == 0, again.stderr
        assert "   debootstrap --variant" not in again.stderr
        assert "   docker build " not in again.stderr
        assert "   docker import " not in again.stderr
    finally:
        down = _trialog(env, "down")
    assert down.returncode == 0, down.stderr

    after = _trialog(env, "status", "--json")
    assert after.returncode == 1
    components = json.loads(after.stdout)["components"]
    assert components["kafka"]["healthy"] is False
    assert components["jaeger"]["healthy"] is False
    # The engine was not started by this stack, so `down` left it running for everyone else.
    assert components["docker"]["healthy"] is True
