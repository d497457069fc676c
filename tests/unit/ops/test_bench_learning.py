from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from learner.lora import Adaptation, adapt, trainable_parameters
from learner.step import Sample, collate, token_logprobs
from learner.testing import tiny_llama
from learner.trainer import TrainSettings, train_epochs
from ops.bench.learning import add_arguments, render
from ops.bench.learning_loop import StepResult, _targets, evaluate, group_samples, step_tasks
from ops.paired import Outcomes

PROMPT = (1, 70, 71, 72)


@dataclass(frozen=True)
class Reply:
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    action: object = None


def reply(*tokens: int) -> Reply:
    return Reply(tokens, (-1.0,) * len(tokens))


def args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_each_step_takes_the_next_tasks_in_turn() -> None:
    train = ["a", "b", "c"]
    assert [step_tasks(train, step, 2) for step in range(3)] == [["a", "b"], ["c", "a"], ["b", "c"]]
    assert [step_tasks(train, step, 1) for step in range(4)] == [["a"], ["b"], ["c"], ["a"]]


def test_advantages_are_relative_to_each_group_and_equal_groups_are_skipped() -> None:
    equal = ([PROMPT] * 2, [reply(5), reply(6)], [-0.2, -0.2])
    mixed = ([PROMPT] * 3, [reply(7), reply(8, 9), reply()], [1.0, -0.2, -0.2])
    samples, trained = group_samples([equal, mixed])
    assert trained == 1
    # mean 0.2, population std 0.5657: advantages +1.414 and -0.707; the empty reply is left out.
    assert [s.response_ids for s in samples] == [(7,), (8, 9)]
    assert samples[0].advantage == pytest.approx(0.8 / 0.565685, rel=1e-4)
    assert samples[1].advantage == pytest.approx(-0.4 / 0.565685, rel=1e-4)
    assert group_samples([equal]) == ([], 0)


def _on_policy(model: torch.nn.Module, response: tuple[int, ...], advantage: float) -> Sample:
    batch = collate([Sample(PROMPT, response, (0.0,) * len(response), advantage)])
    with torch.no_grad():
        logp = token_logprobs(model, batch.input_ids, batch.attention_mask)
    return Sample(
        PROMPT, response, tuple(float(x) for x in logp[0][batch.response_mask[0].bool()]), advantage
    )


def test_every_epoch_is_one_optimizer_step_against_the_same_behaviour_logprobs() -> None:
    model = tiny_llama()
    adapt(model, Adaptation(rank=4))
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=5e-2)
    samples = [_on_policy(model, (80, 81), 1.0), _on_policy(model, (90,), -1.0)]
    stats = train_epochs(model, optimizer, samples, 3, TrainSettings(micro_batch=1))
    assert len(stats) == 3
    assert optimizer.state_dict()["state"][0]["step"] == 3
    assert stats[0].ratio_mean == pytest.approx(1.0, abs=1e-4)  # the first pass is on-policy
    assert abs(stats[2].ratio_mean - 1.0) > 1e-3  # later passes see the moved policy, not new samples


def test_no_samples_no_step_and_epochs_must_be_positive() -> None:
    model = tiny_llama()
    adapt(model, Adaptation(rank=4))
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=5e-2)
    assert train_epochs(model, optimizer, [], 2, TrainSettings()) == []
    assert optimizer.state_dict()["state"] == {}
    with pytest.raises(ValueError, match="epochs"):
        train_epochs(model, optimizer, [_on_policy(model, (80,), 1.0)], 0, TrainSettings())


class FakePolicy:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def sample_batch(self, requests: list[Any]) -> list[Reply]:
        self.batches.append(requests)
        return [Reply((1,), (0.0,), action=r.meta.episode_id) for r in requests]


class FakeGrader:
    def reward(self, task: Any, action: object) -> tuple[float, bool]:
        return (1.0 if str(action).endswith(("-0", "-2")) and task.id == "t1" else -0.2), True


@dataclass(frozen=True)
class FakeSpec:
    instruction: str


@dataclass(frozen=True)
class FakeTask:
    id: str
    spec: FakeSpec


def test_evaluation_samples_every_task_in_one_batch_with_fixed_seeds() -> None:
    policy = FakePolicy()
    tasks = [FakeTask("t1", FakeSpec("do 1")), FakeTask("t2", FakeSpec("do 2"))]
    result = evaluate(policy, FakeGrader(), tasks, args("--eval-per-task", "3"))  # type: ignore[arg-type]
    assert result.outcomes == (True, False, True, False, False, False) and str(result) == "33% (2/6)"
    (batch,) = policy.batches
    assert [r.sampling.seed for r in batch] == [1000, 1001, 1002] * 2
    assert [r.instruction for r in batch] == ["do 1"] * 3 + ["do 2"] * 3
    again = FakePolicy()
    evaluate(again, FakeGrader(), tasks, args("--eval-per-task", "3"))  # type: ignore[arg-type]
    assert [r.meta.episode_id for r in again.batches[0]] == [r.meta.episode_id for r in batch]


def test_lora_targets_are_a_comma_separated_list() -> None:
    assert _targets("q_proj, v_proj,,o_proj") == ("q_proj", "v_proj", "o_proj")
    assert args().lora_targets == "q_proj,k_proj,v_proj,o_proj"
    with pytest.raises(ValueError, match="no layer"):
        _targets(" , ")


def test_the_section_shows_the_settings_the_curve_and_the_reading(tmp_path: Path) -> None:
    options = args(
        "--variant", "shown", "--steps", "2", "--tasks-per-step", "2", "--epochs", "3", "--note", "small"
    )
    curve = [
        StepResult(0, ("toys-000", "toys-001"), (1.0, -0.2, -0.2, -0.2), 1, 3, 1, 12.0),
        StepResult(1, ("toys-002", "toys-004"), (1.0, 1.0, 1.0, -0.2), 3, 4, 2, 14.0),
    ]
    before = Outcomes((True,) * 3 + (False,) * 13)
    after = Outcomes((True, False, True) + (True,) * 7 + (False,) * 6)
    text = render(options, curve, before, after, 120.0, ["toys-003"])
    assert text.startswith("## learning\n")
    assert "--variant shown --steps 2 --tasks-per-step 2" in text and "--epochs 3" in text
    assert "first half of the steps: 25% (1/4); second half: 75% (3/4)" in text
    assert (
        "before 19% (3/16), after 56% (9/16); same task and seed: 7 failed before and passed after, 1 "
        in text
    )
    assert "(two-sided sign test p = 0.07)" in text
    assert "(trained on): 3 of 4" in text
    assert "- reading: small\n" in text
    assert "| 2 | toys-002 toys-004 | 3/4 | 4/4 | 0.70 | 2/2 | 14 |" in text
    assert "Held-out tasks (toys-003)" in text
