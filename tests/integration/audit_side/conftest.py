"""One real run for the audit side's integration tests: `trialog run start --spawn`, scripted policy.

Two episodes of one example task, on real Kafka and real Docker sandboxes, with the run's own
TRIALOG_HOME (so its object store is a folder only this run wrote). The run is made once per session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from ops.paths import REPO_ROOT

TASK = REPO_ROOT / "examples" / "tasks" / "easy-fix-add"
EPISODES = 2
RUN_TIMEOUT_S = 600  # generous: a 2-core machine shared with other work


@dataclass(frozen=True)
class RealRun:
    name: str
    bootstrap: str
    objects: Path
    home: Path

    def options(self) -> list[str]:
        return ["--bootstrap", self.bootstrap, "--objects", str(self.objects), "--timeout", "60"]


def _logs(home: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(home.glob("runs/*/logs/*"))
    )


@pytest.fixture(scope="session")
def real_run(
    kafka_bootstrap: str, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealRun]:
    name = f"aud{uuid.uuid4().hex[:8]}"
    home = tmp_path_factory.mktemp("audit-side") / "home"
    # DOCKER_HOST points at the stack's engine (the docker_client fixture set it); the workers inherit it.
    env = {**os.environ, "TRIALOG_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    result = subprocess.run(
        [
            sys.executable, "-m", "ops.cli", "run", "start", "--tasks", str(TASK),
            "--episodes", str(EPISODES), "--policy", "scripted", "--run", name, "--spawn",
            "--bootstrap", kafka_bootstrap,
            "--capacity", "2",
        ],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{_logs(home)}"
    assert f"ended {EPISODES}/{EPISODES} (completed {EPISODES}, failed 0)" in result.stderr, result.stderr
    print(f"run start --spawn, {EPISODES} episodes: {time.monotonic() - started:.1f} s")
    yield RealRun(name, kafka_bootstrap, home / "objects", home)
