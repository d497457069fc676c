"""No leaks from a SIGKILLed worker: `trialog worker sandbox` processes, started with the command line of
`trialog run start --spawn` (`ops.run_workers`), on real Kafka and Docker.

A worker that is killed runs no clean-up: its held and warm sandboxes keep running, and its scratch folders
stay. The next worker to start on the host removes them at once (and every worker sweeps periodically);
sandboxes of live workers, another run's included, are kept.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest
from kafka import KafkaConsumer, KafkaProducer

from ops.paths import REPO_ROOT, Paths
from ops.run_workers import Workers, worker_commands
from ops.stack.images import sandbox_ref
from schemas.actions import RunCommand, SandboxAction, WriteFile
from schemas.codec import default_codec
from schemas.common import Producer, Verdict
from schemas.events import EpisodeCompleted, StepExecuted
from schemas.topics import EPISODE_EVENTS, SANDBOX_REQUESTS, SANDBOX_RESULTS
from streams.kafka.serving import METADATA_MAX_AGE_MS
from streams.kafka.topics import ensure_topics
from tests.unit.sandbox.requests import sandbox_request

CODEC = default_codec()
RECLAIMED_WITHIN_S = 60.0
WORKER_LABEL = "dev.trialog.worker"
A_WRITE = WriteFile("a.txt", b"a\n")


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    give_up = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)


class Run:
    """One run's topics, its sandbox worker processes (`Workers`, one per process) and its answers."""

    def __init__(self, bootstrap: str, paths: Paths, logs: Path, environment: dict[str, str]) -> None:
        self.id = f"rp{uuid.uuid4().hex[:8]}"
        self.bootstrap = bootstrap
        self.paths = paths
        self.logs = logs
        self.environment = environment
        ensure_topics(bootstrap, self.id)
        self.workers: dict[str, Workers] = {}
        self.answers = KafkaConsumer(
            SANDBOX_RESULTS.of(self.id),
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
        )
        self.producer = KafkaProducer(bootstrap_servers=bootstrap)

    def start(self, instance: str, *options: str) -> None:
        argv = worker_commands(
            self.id, self.bootstrap, "scripted", [], self.paths, instances={"sandbox": instance}
        )
        workers = Workers(self.logs / instance)
        saved = dict(os.environ)
        os.environ.update(self.environment)  # Workers.start passes this process's environment on
        try:
            workers.start({"sandbox": [*argv["sandbox"], "--pool", "2", *options]})
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.workers[instance] = workers

    def one_step(self, episode: str, action: SandboxAction = A_WRITE) -> StepExecuted:
        request = sandbox_request(action, episode=episode, image=str(sandbox_ref()))
        self.producer.send(
            SANDBOX_REQUESTS.of(self.id), key=episode.encode(), value=CODEC.encode(request)
        ).get(30)
        give_up = time.monotonic() + 180
        while time.monotonic() < give_up:
            for records in self.answers.poll(timeout_ms=500).values():
                for record in records:
                    answer = CODEC.decode(record.value)
                    if isinstance(answer, StepExecuted) and answer.meta.episode_id == episode:
                        return answer
        raise AssertionError(f"no answer to {episode}: see the logs under {self.logs}")

    def end(self, episode: str) -> None:
        """Write the episode's end on `episode.events`, as its owner does."""
        request = sandbox_request(WriteFile("a.txt", b""), episode=episode)
        meta = dataclasses.replace(request.meta, producer=Producer("streams", "test"), run_id=self.id)
        completed = EpisodeCompleted(meta, 1.0, Verdict.PASS, 1, 1000)
        self.producer.send(
            EPISODE_EVENTS.of(self.id), key=episode.encode(), value=CODEC.encode(completed)
        ).get(30)

    def close(self) -> None:
        for workers in self.workers.values():
            workers.stop(grace_s=20)
        self.answers.close()
        self.producer.close()


def sandboxes_of(client: docker.DockerClient, instance: str) -> list[str]:
    # The low-level list: `containers.list` inspects each one afterwards, and one reaped meanwhile raises.
    return [
        str(c["Id"]) for c in client.api.containers(all=True, filters={"label": f"{WORKER_LABEL}={instance}"})
    ]


def killed_scratch_owner(tmp: Path) -> Path:
    """A scratch folder made by `owned_temp_dir` in a process that was then SIGKILLed."""
    code = (
        "import sys, time\n"
        "from sandbox_agent.scratch import owned_temp_dir\n"
        "folder = owned_temp_dir(prefix='trialog-verify-')\n"
        "open(folder.name + '/task.py', 'w').write('x')\n"
        "print(folder.name, flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp)},
        text=True,
    )
    assert child.stdout is not None
    folder = Path(child.stdout.readline().strip())
    child.kill()
    child.wait()
    return folder


@pytest.fixture
def runs(kafka_bootstrap: str, stack_paths: Paths, tmp_path: Path) -> Iterator[Callable[[], Run]]:
    made: list[Run] = []
    paths = Paths(tmp_path / "home", stack_paths.cache)
    environment = {"TMPDIR": str(tmp_path / "tmp"), "PYTHONUNBUFFERED": "1"}
    (tmp_path / "tmp").mkdir()

    def make() -> Run:
        made.append(Run(kafka_bootstrap, paths, tmp_path / "logs", environment))
        return made[-1]

    yield make
    for run in made:
        run.close()


def test_a_killed_workers_sandboxes_and_scratch_are_reclaimed_and_live_workers_keep_theirs(
    docker_client: docker.DockerClient, runs: Callable[[], Run], tmp_path: Path
) -> None:
    mine, other = runs(), runs()
    mine.start("w-dead")
    other.start("w-other", "--reap-every", "3600")  # this one never sweeps again: the restart must
    mine.one_step("ep-1")
    other.one_step("ep-2")
    # One sandbox held for the episode, two warm ones.
    wait_for(lambda: len(sandboxes_of(docker_client, "w-dead")) == 3, 120, "w-dead's pool filled")
    wait_for(lambda: len(sandboxes_of(docker_client, "w-other")) == 3, 120, "w-other's pool filled")
    kept = sorted(sandboxes_of(docker_client, "w-other"))
    orphaned = sandboxes_of(docker_client, "w-dead")
    scratch = killed_scratch_owner(tmp_path / "tmp")
    assert scratch.is_dir()

    mine.workers["w-dead"].kill("sandbox")
    killed = time.monotonic()
    assert set(sandboxes_of(docker_client, "w-dead")) == set(orphaned)  # nothing cleaned up by itself
    mine.start("w-restarted", "--reap-every", "1")
    wait_for(lambda: not sandboxes_of(docker_client, "w-dead"), RECLAIMED_WITHIN_S, "w-dead's sandboxes gone")
    assert time.monotonic() - killed < RECLAIMED_WITHIN_S
    wait_for(lambda: not scratch.exists(), 30, "the killed process's scratch folder swept")

    mine.one_step("ep-3")  # the restarted worker serves, and has swept a few times meanwhile
    time.sleep(3)
    assert sorted(sandboxes_of(docker_client, "w-other")) == kept
    assert len(sandboxes_of(docker_client, "w-restarted")) == 3


def test_an_ended_episode_releases_its_sandbox_and_its_recorded_steps(
    docker_client: docker.DockerClient, runs: Callable[[], Run], tmp_path: Path
) -> None:
    run = runs()
    run.start("w-ends")
    log = tmp_path / "logs" / "w-ends" / "sandbox.log"
    wait_for(lambda: "episode ends: following" in log.read_text(), 120, "the worker follows episode.events")
    fresh = RunCommand("cat /proc/sys/kernel/random/uuid")
    first = run.one_step("ep-e", fresh)
    assert run.one_step("ep-e", fresh).stdout == first.stdout  # a redelivery: answered from the record
    wait_for(lambda: len(sandboxes_of(docker_client, "w-ends")) == 3, 120, "one held, two warm")
    run.end("ep-e")
    wait_for(lambda: len(sandboxes_of(docker_client, "w-ends")) == 2, 60, "the held sandbox released")
    again = run.one_step("ep-e", fresh)  # the record is gone: the step runs again
    assert again.stdout != first.stdout


MAKE_A_SANDBOX_AND_WAIT = """
import sys, time
import docker
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import SandboxSpec
from schemas.blobs import LocalObjectStore
from tests.integration.sandbox.conftest import SMALL
labels = {"dev.trialog.reaper-test": sys.argv[2]}
backend = DockerBackend(docker.from_env(), LocalObjectStore(sys.argv[1]), labels=labels)
print(backend.create(SandboxSpec(sys.argv[3], SMALL)).id, flush=True)
time.sleep(600)
"""


def sandbox_of_a_process(tmp_path: Path, tag: str) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-c", MAKE_A_SANDBOX_AND_WAIT, str(tmp_path / "objects"), tag, str(sandbox_ref())]
    child = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    return child, child.stdout.readline().strip()


def test_a_starting_verifier_removes_the_sandboxes_of_dead_processes_only(
    docker_client: docker.DockerClient, kafka_bootstrap: str, stack_paths: Paths, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    killed, orphan = sandbox_of_a_process(tmp_path, tag)
    live, kept = sandbox_of_a_process(tmp_path, tag)
    verifier = Workers(tmp_path / "logs")
    try:
        assert orphan and kept
        killed.kill()
        killed.wait()
        run = f"rv{tag}"
        ensure_topics(kafka_bootstrap, run)
        paths = Paths(tmp_path / "home", stack_paths.cache)
        tasks = [REPO_ROOT / "examples" / "tasks" / "easy-fix-add"]
        verifier.start(
            {"verifier": worker_commands(run, kafka_bootstrap, "scripted", tasks, paths)["verifier"]}
        )
        tagged = {"label": f"dev.trialog.reaper-test={tag}"}
        wait_for(
            lambda: [str(c["Id"]) for c in docker_client.api.containers(all=True, filters=tagged)] == [kept],
            RECLAIMED_WITHIN_S,
            "the killed process's sandbox removed, the live one's kept",
        )
    finally:
        verifier.stop(grace_s=20)
        live.kill()
        live.wait()
        for container in docker_client.containers.list(
            all=True, filters={"label": f"dev.trialog.reaper-test={tag}"}
        ):
            container.remove(force=True)
