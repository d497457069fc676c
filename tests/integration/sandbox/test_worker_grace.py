"""A real `trialog worker sandbox` process stopped by SIGTERM in the middle of a step: its probes say it
works, then that it stops; it exits 0 when its grace period runs out, having committed nothing for the
step; another worker of the group is handed the step and answers it. An idle worker stops at once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import docker
from kafka import KafkaProducer

from ops.paths import REPO_ROOT
from ops.process import free_port, wait_until
from ops.stack.images import sandbox_ref
from schemas.actions import RunCommand
from schemas.events import StepExecuted
from schemas.topics import SANDBOX_REQUESTS
from tests.integration.actors.kafka_helpers import CODEC, new_run, next_records, reading
from tests.integration.probes import probe
from tests.unit.sandbox.requests import sandbox_request

GRACE_S = 3.0
STEP_S = 10  # longer than the grace period: the step cannot finish in it


def _worker(run: str, bootstrap: str, name: str, port: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "ops.cli", "worker", "sandbox", "--bootstrap", bootstrap, "--run", run,
        "--group", f"{run}-sandbox", "--instance", name, "--objects", str(tmp_path / "objects"),
        "--state", str(tmp_path / name), "--pool", "0", "--health-port", str(port),
        "--grace-s", str(GRACE_S),
    ]  # fmt: skip
    with (tmp_path / f"{name}.log").open("wb") as log:
        return subprocess.Popen(command, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT)


def test_a_stopped_worker_hands_its_step_back_within_its_grace_period(
    docker_client: docker.DockerClient, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = new_run(kafka_bootstrap, "grace")
    names = [f"grace-{uuid.uuid4().hex[:6]}-{n}" for n in ("a", "b")]
    ports = [free_port(), free_port()]
    first = _worker(run, kafka_bootstrap, names[0], ports[0], tmp_path)
    second = None
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    try:
        assert wait_until(lambda: probe(ports[0], "/readyz")[0] == 200, timeout_s=120), _log(
            tmp_path, names[0]
        )
        assert probe(ports[0], "/healthz")[0] == 200
        step = sandbox_request(
            RunCommand(f"sleep {STEP_S}; echo slept"), episode="ep-g", image=str(sandbox_ref()), timeout_s=60
        )
        with reading(kafka_bootstrap, run, "sandbox.results") as answers:
            producer.send(SANDBOX_REQUESTS.of(run), key=b"ep-g", value=CODEC.encode(step)).get(30)
            # The liveness probe says when the step is in hand (a beat with the group's allowance).
            assert wait_until(lambda: _working(ports[0]), timeout_s=60), _log(tmp_path, names[0])

            asked = time.monotonic()
            first.send_signal(signal.SIGTERM)
            assert wait_until(lambda: probe(ports[0], "/readyz")[1].get("process") == "stopping", timeout_s=2)
            assert first.wait(timeout=30) == 0, _log(tmp_path, names[0])
            took = time.monotonic() - asked
            assert GRACE_S <= took < GRACE_S + 10, took
            assert "will be redelivered" in _log(tmp_path, names[0])

            # Nothing was committed for the step: the next member of the group is handed it.
            second = _worker(run, kafka_bootstrap, names[1], ports[1], tmp_path)
            (record,) = next_records(answers, 1, timeout_s=150)
        answer = CODEC.decode(record.value)
        assert isinstance(answer, StepExecuted), answer
        assert answer.stdout.text == "slept\n" and answer.meta.producer.instance == names[1]

        # An idle worker stops on its own within its grace period (not ended by it), with exit 0.
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0, _log(tmp_path, names[1])
        assert "will be redelivered" not in _log(tmp_path, names[1])
    finally:
        producer.close()
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        for name in names:  # the first worker's sandbox, had the second's sweep not removed it
            for container in docker_client.containers.list(
                all=True, filters={"label": f"dev.trialog.worker={name}"}
            ):
                container.remove(force=True)


def _working(port: int) -> bool:
    return any(str(state).startswith("working") for state in probe(port, "/healthz")[1].values())


def _log(tmp_path: Path, name: str) -> str:
    return (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
