"""One episode, one trace: a real run (`trialog run start --spawn`) traced to a real Jaeger.

Two episodes of one example task with the scripted policy; every process (the scheduler in `run start`,
the spawned streams, rollout, sandbox and verifier workers) exports its spans by OTLP to the Jaeger the
fixture started. Jaeger's query API must then hold, under the trace id derived from one episode's id, spans
of every service, the episode's root span with its derived id, and no span whose parent is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import docker

from ops.paths import REPO_ROOT
from ops.testing import JaegerProcess
from schemas.commands import StartEpisode
from schemas.topics import EPISODE_COMMANDS, POLICY_REQUESTS, topic_name
from streams.kafka.reader import read_to_end
from streams.telemetry.ids import episode_root_span_id, episode_trace_id

EXAMPLE = REPO_ROOT / "examples" / "tasks" / "easy-fix-add"
SERVICES = {"trialog-scheduler", "trialog-streams", "trialog-rollout", "trialog-sandbox", "trialog-verifier"}
# The scripted policy applies the patch, then submits: one sandbox step, one verification.
OPERATIONS = {
    "episode",
    "scheduler.start_episode",
    "owner.episode.commands",
    "policy.call",
    "owner.policy.results",
    "sandbox.exec",
    "sandbox.acquire",
    "sandbox.snapshot",
    "owner.sandbox.results",
    "verify",
    "owner.verify.results",
}
TRACE_TIMEOUT_S = 90


def _trace(jaeger: JaegerProcess, trace_id: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(
            f"{jaeger.ports.query_url}/api/traces/{trace_id}", timeout=10
        ) as response:
            found = json.loads(response.read())["data"] or []
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return found[0] if found else None


def _services(trace: dict[str, Any]) -> dict[str, str]:
    """span id -> the service that emitted it."""
    processes = {key: p["serviceName"] for key, p in trace["processes"].items()}
    return {span["spanID"]: processes[span["processID"]] for span in trace["spans"]}


def _complete(trace: dict[str, Any] | None) -> bool:
    if trace is None:
        return False
    names = {span["operationName"] for span in trace["spans"]}
    return set(_services(trace).values()) >= SERVICES and names >= OPERATIONS


def _logs(home: Path) -> str:
    return "\n".join(
        f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
        for log in sorted(home.glob("runs/*/logs/*"))
    )


def test_one_episode_is_one_trace_across_every_worker(
    kafka_bootstrap: str, docker_client: docker.DockerClient, jaeger_process: JaegerProcess, tmp_path: Path
) -> None:
    run = f"trc{uuid.uuid4().hex[:8]}"
    home = tmp_path / "home"
    env = {**os.environ, "TRIALOG_HOME": str(home), "PYTHONUNBUFFERED": "1", "TRIALOG_TRACING": "on"}
    result = subprocess.run(
        [
            sys.executable, "-m", "ops.cli", "run", "start", "--tasks", str(EXAMPLE), "--episodes", "2",
            "--policy", "scripted", "--run", run, "--spawn", "--bootstrap", kafka_bootstrap,
            "--capacity", "2", "--otlp-endpoint", jaeger_process.ports.otlp_grpc_endpoint,
        ],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stderr}\n{_logs(home)}"
    assert "ended 2/2 (completed 2, failed 0)" in result.stderr, result.stderr

    commands = [v for _t, v in read_to_end(kafka_bootstrap, [EPISODE_COMMANDS.of(run)])]
    episodes = [c.episode_id for c in commands if isinstance(c, StartEpisode)]
    assert len(episodes) == 2
    episode, other = episodes
    trace_id = f"{episode_trace_id(episode):032x}"

    # Spans are batched and flushed when each process stops: poll until every part has arrived.
    give_up = time.monotonic() + TRACE_TIMEOUT_S
    trace = _trace(jaeger_process, trace_id)
    while not _complete(trace) and time.monotonic() < give_up:
        time.sleep(1.0)
        trace = _trace(jaeger_process, trace_id)
    assert trace is not None, f"no trace {trace_id} in Jaeger\n{_logs(home)}"
    spans = trace["spans"]
    names = sorted(span["operationName"] for span in spans)
    services = _services(trace)
    assert _complete(trace), f"{names} from {sorted(set(services.values()))}\n{_logs(home)}"

    # One trace, one root with the id every process derives, and every other span's parent in the trace.
    by_id = {span["spanID"]: span for span in spans}
    assert {span["traceID"] for span in spans} == {trace_id}
    (root,) = [span for span in spans if span["operationName"] == "episode"]
    assert root["spanID"] == f"{episode_root_span_id(episode):016x}" and root["references"] == []
    assert services[root["spanID"]] == "trialog-streams"
    for span in spans:
        if span is root:
            continue
        parents = [ref["spanID"] for ref in span["references"] if ref["refType"] == "CHILD_OF"]
        assert len(parents) == 1 and parents[0] in by_id, f"{span['operationName']} has parent {parents}"

    def parent_name(span: dict[str, Any]) -> str:
        return str(by_id[span["references"][0]["spanID"]]["operationName"])

    def tags(span: dict[str, Any]) -> dict[str, Any]:
        return {tag["key"]: tag["value"] for tag in span["tags"]}

    # The chain of causes: scheduler -> owner -> worker -> owner, across processes through Kafka headers.
    by_start = sorted(spans, key=lambda s: s["startTime"], reverse=True)
    first = {span["operationName"]: span for span in by_start}  # the earliest of each name
    calls = [s for s in by_start if s["operationName"] == "policy.call"]
    assert len(calls) == 2 and parent_name(calls[0]) == "owner.sandbox.results"  # step 1 after step 0
    assert parent_name(first["scheduler.start_episode"]) == "episode"
    assert parent_name(first["owner.episode.commands"]) == "scheduler.start_episode"
    assert parent_name(first["policy.call"]) == "owner.episode.commands"
    assert parent_name(first["owner.policy.results"]) == "policy.call"
    assert parent_name(first["sandbox.exec"]) == "owner.policy.results"
    assert parent_name(first["sandbox.snapshot"]) == "sandbox.exec"
    assert parent_name(first["sandbox.acquire"]) == "sandbox.exec"
    assert parent_name(first["owner.sandbox.results"]) == "sandbox.exec"
    assert parent_name(first["verify"]) in ("owner.policy.results", "owner.sandbox.results")
    assert parent_name(first["owner.verify.results"]) == "verify"
    for name, service in (
        ("policy.call", "trialog-rollout"),
        ("sandbox.exec", "trialog-sandbox"),
        ("verify", "trialog-verifier"),
        ("owner.policy.results", "trialog-streams"),
    ):
        assert services[first[name]["spanID"]] == service

    # Attributes: the episode's identity and the Kafka record each span handled.
    call = tags(first["policy.call"])
    assert call["trialog.episode"] == episode and call["trialog.run"] == run
    assert (
        call["trialog.task"] == "easy-fix-add" and call["trialog.step"] == 0 and call["trialog.attempt"] == 1
    )
    assert "trialog.task_version" in call and "trialog.policy_version" in call
    assert call["messaging.destination.name"] == POLICY_REQUESTS.of(run)
    assert isinstance(call["messaging.kafka.offset"], int)
    assert tags(first["owner.verify.results"])["messaging.destination.name"] == topic_name(
        run, "verify.results"
    )
    assert all(tags(span).get("trialog.episode", episode) == episode for span in spans)  # not the other's
    assert (
        root["startTime"]
        <= first["owner.episode.commands"]["startTime"] + first["owner.episode.commands"]["duration"]
    )
    assert _trace(jaeger_process, f"{episode_trace_id(other):032x}") is not None  # the other has its own
