"""The request loop's decisions without Kafka (garbage -> dead-letter reasons), and the worker CLIs."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from actors.rollout.simple_policies import RandomPolicy, ScriptedPolicy
from actors.rollout.worker import ROUTE, RolloutWorker
from ops.cli import kit
from ops.cli.workers import rollout as rollout_cli
from ops.cli.workers import verifier as verifier_cli
from ops.paths import REPO_ROOT
from ops.telemetry.otel import OtelTracer
from schemas.codec import default_codec
from schemas.events import ActionProposed
from schemas.object_stores import StoreLocation
from schemas.requests import PolicyRequest
from streams.kafka.request_loop import LoopSettings, Refused, RequestLoop
from streams.telemetry import tracing
from streams.telemetry.ids import TRACEPARENT, SpanRef, episode_trace_id, traceparent_from_headers
from tests.unit.actors.requests import fixed_origin, policy_request, request_meta, verify_request

CODEC = default_codec()


def _loop(handle: object = None) -> RequestLoop[PolicyRequest]:
    worker = RolloutWorker(RandomPolicy(), fixed_origin())
    settings = LoopSettings("127.0.0.1:1", "g", run="r1")
    return RequestLoop(ROUTE, handle or worker.handle, settings, fixed_origin())  # type: ignore[arg-type]


def test_topics_carry_the_run_prefix() -> None:
    loop = _loop()
    assert (loop.requests_topic, loop.results_topic, loop.deadletter_topic) == (
        "r1.policy.requests",
        "r1.policy.results",
        "r1.deadletter",
    )


def test_a_request_is_answered_under_its_episode_key() -> None:
    request = policy_request()
    outcome = _loop().answer(CODEC.encode(request))
    assert isinstance(outcome, tuple)
    key, value = outcome
    answer = CODEC.decode(value)
    assert key == b"ep-1" and isinstance(answer, ActionProposed) and answer.meta.step == request.meta.step


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "empty_record"),
        (b"", "too_short"),
        (b"not a record at all", "wrong_magic"),
        (b"\xc3\x01" + b"\x00" * 8 + b"body", "unknown_fingerprint"),
        (CODEC.encode(verify_request()), "unexpected_type"),
    ],
)
def test_garbage_is_refused_with_a_reason(value: bytes | None, reason: str) -> None:
    outcome = _loop().answer(value)
    assert isinstance(outcome, Refused) and outcome.reason == reason


def test_a_handler_that_fails_is_refused_not_raised() -> None:
    def broken(request: PolicyRequest) -> ActionProposed:
        raise RuntimeError("boom")

    outcome = _loop(broken).answer(CODEC.encode(policy_request()))
    assert isinstance(outcome, Refused) and outcome.reason == "handler_error" and "boom" in outcome.detail
    scripted = RolloutWorker(ScriptedPolicy({}), fixed_origin())
    refused = _loop(scripted.handle).answer(CODEC.encode(policy_request()))
    assert isinstance(refused, Refused) and refused.reason == "no_script"


def _parse(register: object, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trialog worker")
    register(parser.add_subparsers(dest="worker", required=True))  # type: ignore[operator]
    return parser.parse_args(argv)


def test_rollout_cli_makes_the_policy(tmp_path: Path) -> None:
    args = _parse(rollout_cli.register, ["rollout", "--policy", "random", "--run", "r", "--group", "g"])
    assert (args.run, args.group, args.bootstrap) == ("r", "g", None)
    assert isinstance(rollout_cli.make_policy(args), RandomPolicy)
    actions = tmp_path / "a.json"
    actions.write_text(json.dumps({"easy-fix-range": [{"tool": "run", "command": "ls"}]}))
    examples = str(REPO_ROOT / "examples" / "tasks")
    args = _parse(rollout_cli.register, ["rollout", "--solutions", examples, "--actions", str(actions)])
    policy = rollout_cli.make_policy(args)
    assert isinstance(policy, ScriptedPolicy) and len(policy.scripts) > 1
    assert [type(a).__name__ for a in policy.scripts["easy-fix-range"]] == ["RunCommand"]  # the file wins
    with pytest.raises(ValueError, match="needs --actions"):
        rollout_cli.make_policy(_parse(rollout_cli.register, ["rollout"]))


def test_rollout_cli_checks_the_llm_options_before_loading_a_model() -> None:
    for argv, refusal in [
        (["--policy", "random", "--versions-run", "r"], "--versions-run needs --policy llm"),
        (["--policy", "random", "--batch-linger-ms", "500"], "--batch-linger-ms is for --policy llm"),
        (["--policy", "random", "--batch", "4"], "--batch is for --policy llm"),
    ]:
        with pytest.raises(ValueError, match=refusal):
            rollout_cli.make_policy(_parse(rollout_cli.register, ["rollout", *argv]))
    # Hot swap is no longer refused with vLLM: here the engine itself is what is missing, and it says so.
    from actors.rollout.vllm_backend import BackendUnavailable

    vllm = ["rollout", "--policy", "llm", "--backend", "vllm", "--versions-run", "r", "--model", "/nowhere"]
    with pytest.raises(BackendUnavailable, match="needs the vllm package"):
        rollout_cli.make_policy(_parse(rollout_cli.register, vllm))


def test_verifier_cli_arguments() -> None:
    args = _parse(verifier_cli.register, ["verifier", "--tasks", "a", "--tasks", "b", "--objects", "o"])
    assert args.tasks == [Path("a"), Path("b")] and args.objects == StoreLocation(folder=Path("o"))
    assert (args.group, args.run) == (None, "")
    # The default group is the run's own: a worker started by hand never joins another run's group.
    assert kit.group_of(args, "verifier") == "trialog-verifier"
    of_run = _parse(verifier_cli.register, ["verifier", "--tasks", "a", "--run", "r7"])
    assert kit.group_of(of_run, "verifier") == "r7.trialog-verifier"
    named = _parse(verifier_cli.register, ["verifier", "--tasks", "a", "--run", "r7", "--group", "mine"])
    assert kit.group_of(named, "verifier") == "mine"
    with pytest.raises(SystemExit):
        _parse(verifier_cli.register, ["verifier", "--tasks", "a", "--group", "no spaces"])
    with pytest.raises(SystemExit):
        _parse(verifier_cli.register, ["verifier"])  # --tasks is required


def test_the_verifier_waits_past_its_slowest_task(tmp_path: Path) -> None:
    from actors.verifier.tasks import FolderTasks

    tasks = FolderTasks([REPO_ROOT / "examples" / "tasks"])
    assert verifier_cli.poll_interval_ms(tasks) == 900_000  # the examples are quick
    slow = tmp_path / "slow"
    shutil.copytree(REPO_ROOT / "examples" / "tasks" / "easy-fix-range", slow)
    toml = slow / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_s = 30", "timeout_s = 3600"))
    assert verifier_cli.poll_interval_ms(FolderTasks([slow])) == (2 * 3600 + 300) * 1000


@dataclasses.dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, list[tuple[str, bytes]]]] = []

    def send(self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> _Producer:
        self.sent.append((topic, key, headers))
        return self

    def get(self, timeout: float) -> None:
        pass


def test_batched_requests_each_get_a_span_from_their_header_and_answers_name_it() -> None:
    worker = RolloutWorker(RandomPolicy(), fixed_origin())
    batches: list[int] = []

    def handle_batch(requests: list[PolicyRequest]) -> list[ActionProposed]:
        batches.append(len(requests))
        return [worker.handle(r) for r in requests]

    settings = LoopSettings("127.0.0.1:1", "g", run="r1", max_batch=4)
    loop = RequestLoop(ROUTE, worker.handle, settings, fixed_origin(), handle_batch=handle_batch)
    episodes = ("ep-1", "ep-2")
    senders = {e: SpanRef(episode_trace_id(e), n) for e, n in zip(episodes, (0x61, 0x62), strict=True)}
    records = [
        _Record(
            "r1.policy.requests", 0, offset, e.encode(),
            CODEC.encode(policy_request(meta=request_meta(episode=e))),
            [(TRACEPARENT, senders[e].traceparent().encode())],
        )
        for offset, e in enumerate(episodes)
    ]  # fmt: skip
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-rollout", SimpleSpanProcessor(exporter))
    producer = _Producer()
    with tracing.installed(tracer):
        loop.answer_ahead(records)
        for record in records:
            loop.serve(record, producer)
    tracer.shutdown()
    assert batches == [2]  # answered together, ahead of the spans
    spans = {dict(s.attributes or {})["trialog.episode"]: s for s in exporter.get_finished_spans()}
    assert set(spans) == set(episodes) and all(s.name == "policy.call" for s in spans.values())
    for (_topic, key, headers), episode in zip(producer.sent, episodes, strict=True):
        span = spans[episode]
        context = span.get_span_context()
        assert key == episode.encode() and context is not None and span.parent is not None
        assert context.trace_id == episode_trace_id(episode)
        assert span.parent.span_id == senders[episode].span_id
        assert traceparent_from_headers(headers) == SpanRef(context.trace_id, context.span_id)
