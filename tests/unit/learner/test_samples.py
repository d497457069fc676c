from __future__ import annotations

import dataclasses

import pytest

from learner import testing
from learner.samples import (
    BytesPromptEncoder,
    group_samples,
    make_encoder,
    step_request,
    trajectory_samples,
)
from ops.cli.main import build_parser
from schemas.actions import RunCommand, Submit


def test_each_turn_becomes_a_sample_with_its_prompt_response_and_behaviour_logprobs() -> None:
    trajectory = testing.trajectory(actions=(RunCommand("ls"), RunCommand("cat a.py"), Submit()))
    samples, counts = trajectory_samples(trajectory, 0.5, BytesPromptEncoder())
    assert counts.samples == 3 and counts.refused_prompt == 0
    for sample, step in zip(samples, trajectory.steps, strict=True):
        assert sample.prompt_ids == tuple(trajectory.instruction.encode())
        assert sample.response_ids == step.action.token_ids
        assert sample.behaviour_logprobs == step.action.logprobs
        assert sample.advantage == 0.5


def test_the_rebuilt_request_of_a_turn_holds_only_the_turns_before_it() -> None:
    trajectory = testing.trajectory(actions=(RunCommand("ls"), RunCommand("pwd"), Submit()))
    request = step_request(trajectory, 2)
    assert request.instruction == trajectory.instruction
    assert request.history == trajectory.steps[:2]
    assert request.meta.step == 2


class HistoryEncoder:
    """A prompt that grows with the history (as a chat prompt does)."""

    def encode(self, request: object) -> list[int]:
        history = request.history  # type: ignore[attr-defined]
        return [1] + [2] * len(history)


def test_a_prompt_whose_rebuilt_length_differs_from_the_recorded_one_is_refused() -> None:
    trajectory = testing.trajectory(actions=(RunCommand("ls"), Submit()), encoder=HistoryEncoder())
    good, counts = trajectory_samples(trajectory, 1.0, HistoryEncoder())
    assert counts.samples == 2
    assert [s.prompt_ids for s in good] == [(1,), (1, 2)]
    # The same trajectory rebuilt with another encoder: the lengths no longer match the record.
    refused, counts = trajectory_samples(trajectory, 1.0, BytesPromptEncoder())
    assert refused == []
    assert counts.refused_prompt == 2


def test_a_turn_without_response_tokens_is_counted_not_trained() -> None:
    trajectory = testing.trajectory(actions=(RunCommand("ls"), Submit()))
    step = trajectory.steps[0]
    empty = dataclasses.replace(step, action=dataclasses.replace(step.action, token_ids=(), logprobs=()))
    trajectory = dataclasses.replace(trajectory, steps=(empty, trajectory.steps[1]))
    samples, counts = trajectory_samples(trajectory, 1.0, BytesPromptEncoder())
    assert len(samples) == 1 and counts.empty == 1


def test_a_group_gives_each_trajectory_its_own_advantage() -> None:
    members = testing.group("g", [1.0, 0.0])
    samples, counts = group_samples(members, [1.0, -1.0], BytesPromptEncoder())
    assert counts.samples == 4
    assert [s.advantage for s in samples] == [1.0, 1.0, -1.0, -1.0]


def test_encoders_by_name() -> None:
    assert isinstance(make_encoder("bytes", None), BytesPromptEncoder)
    with pytest.raises(ValueError, match="tokenizer"):
        make_encoder("chat", None)
    with pytest.raises(ValueError, match="unknown prompt encoder"):
        make_encoder("sentencepiece", None)


def test_the_learner_worker_command_takes_its_options() -> None:
    args = build_parser().parse_args(
        ["worker", "learner", "--run", "r1", "--group-size", "8", "--group-timeout-s", "30",
         "--max-staleness", "1", "--lora-rank", "0", "--lr", "3e-5", "--threads", "2",
         "--prompt-encoder", "bytes", "--checkpoint-dir", "/tmp/ck", "--device", "cpu"]
    )  # fmt: skip
    assert (args.run, args.group_size, args.group_timeout_s, args.max_staleness) == ("r1", 8, 30.0, 1)
    assert (args.lora_rank, args.lr, args.threads, args.prompt_encoder) == (0, 3e-5, 2, "bytes")
    assert args.handler.__name__ == "_cmd_worker_learner"


def _grade(trajectory: object, executed: int, passed: int, total: int = 4) -> object:
    from schemas.common import Verdict
    from schemas.progress import StepGraded

    meta = dataclasses.replace(trajectory.meta, step=executed)  # type: ignore[attr-defined]
    return StepGraded(meta, Verdict.PARTIAL if passed else Verdict.FAIL, passed, total)


def test_each_turn_gets_its_steps_weighted_change_in_pass_rate_and_a_submit_none() -> None:
    from learner.samples import turn_bonuses

    trajectory = testing.trajectory(actions=(RunCommand("edit"), RunCommand("edit more"), Submit()))
    grades = [_grade(trajectory, 0, 1), _grade(trajectory, 1, 3), _grade(trajectory, 2, 2)]
    assert turn_bonuses(trajectory, grades, 0.5) == [0.25, -0.125, 0.0]  # type: ignore[arg-type]
    assert turn_bonuses(trajectory, [], 0.5) == [0.0, 0.0, 0.0]  # nothing graded: the outcome alone
    samples, _ = trajectory_samples(trajectory, 1.0, BytesPromptEncoder(), [0.25, -0.125, 0.0])
    assert [s.advantage for s in samples] == [1.25, 0.875, 1.0]
    first, second = testing.group("g", [1.0, 0.0])
    bonuses = {first.meta.episode_id: [0.5, 0.0]}
    grouped, _ = group_samples([first, second], [1.0, -1.0], BytesPromptEncoder(), bonuses)
    assert [s.advantage for s in grouped] == [1.5, 1.0, -1.0, -1.0]
