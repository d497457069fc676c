"""The rollout worker: policy plugins, the request -> answer handler, tool-call text."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from actors.rollout.policy import PolicyError, Sample, parse_action, render_action
from actors.rollout.simple_policies import RandomPolicy, ScriptedPolicy, seed_for, solution_script
from actors.rollout.worker import RolloutWorker, action_proposed
from actors.tasks.patch import apply_patch, parse_patch, read_tree_file
from actors.tasks.spec import load_task
from ops.paths import REPO_ROOT
from schemas.actions import ApplyPatch, RunCommand, Submit, WriteFile
from schemas.codec import default_codec
from schemas.events import ActionProposed
from streams.kafka.request_loop import Refused
from tests.unit.actors.requests import fixed_origin, policy_request, request_meta

EXAMPLES = REPO_ROOT / "examples" / "tasks"


@pytest.mark.parametrize(
    "action",
    [
        RunCommand("ls -la"),
        WriteFile("a/b.py", "x = 'é'\n".encode()),
        ApplyPatch("--- a\n+++ b\n"),
        Submit("ok"),
    ],
)
def test_tool_calls_round_trip_through_text(action: object) -> None:
    assert parse_action(json.loads(render_action(action))) == action  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        ({"tool": "rm"}, "unknown tool"),
        ({"tool": "run"}, "'command' must be a string"),
        ({"tool": "run", "command": "ls", "extra": 1}, "unknown field"),
        (["run"], "JSON object"),
    ],
)
def test_bad_tool_calls_are_named(call: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_action(call)  # type: ignore[arg-type]


def test_scripted_plays_the_solution_patch_then_submits() -> None:
    task = load_task(EXAMPLES / "easy-fix-range")
    policy = ScriptedPolicy.solving([task])
    first = policy.sample(policy_request(meta=request_meta(task_id=task.id, step=0)))
    second = policy.sample(policy_request(meta=request_meta(task_id=task.id, step=1)))
    assert isinstance(first.action, ApplyPatch) and isinstance(first.action.diff, str)
    assert isinstance(second.action, Submit)
    # The patch it plays is the task's reference solution and applies to repo/.
    changed = apply_patch(parse_patch(first.action.diff), read_tree_file(task.repo_dir))
    assert "n + 1" in str(changed)
    assert (
        first.logprobs == (0.0,) * len(first.token_ids) and bytes(first.token_ids).decode() == first.response
    )
    assert solution_script(task) == (first.action, second.action)
    past_the_end = policy.sample(policy_request(meta=request_meta(task_id=task.id, step=5)))
    assert isinstance(past_the_end.action, Submit)


def test_scripted_from_an_action_file(tmp_path: Path) -> None:
    path = tmp_path / "actions.json"
    path.write_text(json.dumps({"t1": [{"tool": "run", "command": "pytest -q"}, {"tool": "submit"}]}))
    policy = ScriptedPolicy.from_file(path)
    assert policy.sample(policy_request(meta=request_meta(task_id="t1"))).action == RunCommand("pytest -q")
    with pytest.raises(PolicyError, match="no actions for task 'other'") as caught:
        policy.sample(policy_request(meta=request_meta(task_id="other")))
    assert caught.value.reason == "no_script"
    path.write_text(json.dumps({"t1": [{"tool": "fly"}]}))
    with pytest.raises(ValueError, match="task 't1': unknown tool"):
        ScriptedPolicy.from_file(path)


def test_random_is_reproducible_from_seed_and_step() -> None:
    policy = RandomPolicy()
    draws = [policy.sample(policy_request(seed=11, meta=request_meta(step=s))) for s in range(30)]
    again = [
        RandomPolicy().sample(policy_request(seed=11, meta=request_meta(step=s, attempt=2)))
        for s in range(30)
    ]
    assert draws == again  # same seed and step: same action, whatever the attempt or instance
    other = [policy.sample(policy_request(seed=12, meta=request_meta(step=s))) for s in range(30)]
    assert [d.action for d in draws] != [d.action for d in other]
    assert {type(d.action) for d in draws} == {RunCommand, Submit}
    allowed = {RunCommand(c) for c in policy.commands} | {Submit()}
    assert {d.action for d in draws} <= allowed
    probability = dict(policy.choices())
    for draw in draws:
        assert math.isclose(sum(draw.logprobs), math.log(probability[draw.action]), rel_tol=1e-6)
    assert seed_for(11, 3) == seed_for(11, 3) != seed_for(11, 4)


def test_the_answer_echoes_the_key_and_chain_head() -> None:
    request = policy_request(meta=request_meta(episode="ep-9", step=2, attempt=3))
    worker = RolloutWorker(RandomPolicy(), fixed_origin())
    answer = worker.handle(request)
    meta = answer.meta
    assert (meta.episode_id, meta.step, meta.attempt, meta.prev_hash) == (
        "ep-9",
        2,
        3,
        request.meta.prev_hash,
    )
    assert (meta.run_id, meta.task_id, meta.task_version) == ("run-test", "task-1", "v1")
    assert meta.traceparent == request.meta.traceparent and meta.policy_version == 3
    assert meta.producer.kind == "rollout" and meta.event_id != request.meta.event_id
    assert answer.latency_us == 1_000  # the fixed clock ticks once per reading
    assert default_codec().decode(default_codec().encode(answer)) == answer


def test_the_same_request_twice_gets_the_same_answer() -> None:
    request = policy_request(meta=request_meta(step=4))
    for policy in (RandomPolicy(), ScriptedPolicy({"task-1": (RunCommand("ls"),)})):
        worker = RolloutWorker(policy, fixed_origin())
        first, second = worker.handle(request), worker.handle(request)
        strip = {"meta": first.meta}
        assert dataclasses.replace(second, **strip) == first  # only the header's id and time differ
        assert (second.meta.step, second.meta.attempt) == (first.meta.step, first.meta.attempt)


def test_a_policy_refusal_becomes_a_dead_letter_reason() -> None:
    worker = RolloutWorker(ScriptedPolicy({}), fixed_origin())
    with pytest.raises(Refused) as caught:
        worker.handle(policy_request())
    assert caught.value.reason == "no_script"


def test_a_plugin_may_name_the_policy_version_that_sampled() -> None:
    sample = Sample(
        Submit(), "{}", (1, 2), (-0.5, -0.25), prompt_tokens=9, finish_reason="length", policy_version=8
    )
    answer = action_proposed(fixed_origin(), policy_request(), sample, latency_us=5)
    assert isinstance(answer, ActionProposed)
    assert (answer.meta.policy_version, answer.finish_reason, answer.prompt_tokens) == (8, "length", 9)
    with pytest.raises(ValueError, match="2 token ids but 1 log-probs"):
        Sample(Submit(), "{}", (1, 2), (-0.5,), prompt_tokens=0)
