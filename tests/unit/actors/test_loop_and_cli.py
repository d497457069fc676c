"""The request loop's decisions without Kafka (garbage -> dead-letter reasons), and the worker CLIs."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from actors.kafka_loop import LoopSettings, Refused, RequestLoop
from actors.rollout import cli as rollout_cli
from actors.rollout.plugins import RandomPolicy, ScriptedPolicy
from actors.rollout.worker import ROUTE, RolloutWorker
from actors.verifier import cli as verifier_cli
from ops.paths import REPO_ROOT
from schemas.codec import default_codec
from schemas.events import ActionProposed
from schemas.requests import PolicyRequest
from tests.unit.actors.requests import fixed_origin, policy_request, verify_request

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


def test_verifier_cli_arguments() -> None:
    args = _parse(verifier_cli.register, ["verifier", "--tasks", "a", "--tasks", "b", "--objects", "o"])
    assert args.tasks == [Path("a"), Path("b")] and args.objects == Path("o")
    assert (args.group, args.run) == ("trialog-verifier", "")
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
