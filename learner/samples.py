"""A trajectory as training samples: one per model turn, its prompt rebuilt, its response as recorded.

The rollout worker records, per step, the response's token ids with their behaviour log-probs and the
prompt's length, not the prompt itself. The learner rebuilds the prompt of step k from what the trajectory
holds (the instruction and steps 0..k-1), with the same prompt encoder the policy used, and checks its
length against the recorded one: a mismatch means the learner would train on a context the policy never
saw, so the sample is refused (and counted), never guessed.

Observations are the steps' inline output text, which is exactly what the policy was shown: the owner fits
each stream to the record budget (`schemas.budget`) before it appends the step, and the PolicyRequests
carry the appended history. So a trajectory needs nothing from the object store to be trained on; the whole
stream behind `Output.full` is for audit, not for the prompt.

Prompt encoders sit behind `PromptEncoder`. `BytesPromptEncoder` is what the non-neural plugins
(`scripted`, `random`) report: the instruction's UTF-8 bytes (`actors.rollout.policy.prompt_length`).
The chat encoder of the LLM policy (`actors.rollout.llm.ChatPromptEncoder`) is loaded lazily by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from learner.defaults import PROMPT_ENCODERS
from learner.step import Sample
from schemas.progress import StepGraded, process_rewards
from schemas.requests import PolicyRequest, SamplingParams
from schemas.trajectories import TrajectoryCompleted


class PromptEncoder(Protocol):
    def encode(self, request: PolicyRequest) -> list[int]:
        """The prompt token ids the policy was given for `request`."""
        ...


class BytesPromptEncoder:
    """The instruction's UTF-8 bytes: the prompt of the byte-level non-neural plugins."""

    def encode(self, request: PolicyRequest) -> list[int]:
        return list(request.instruction.encode("utf-8"))


@dataclass(frozen=True, slots=True)
class SampleCounts:
    samples: int = 0
    refused_prompt: int = 0  # rebuilt prompt length differs from the recorded one
    empty: int = 0  # a turn with no response tokens (nothing to train)

    def __add__(self, other: SampleCounts) -> SampleCounts:
        return SampleCounts(
            self.samples + other.samples,
            self.refused_prompt + other.refused_prompt,
            self.empty + other.empty,
        )


def step_request(trajectory: TrajectoryCompleted, index: int) -> PolicyRequest:
    """The request step `index` was sampled for: the instruction and the steps before it.

    Sampling parameters are not recorded in the trajectory and do not shape the prompt: defaults."""
    action = trajectory.steps[index].action
    return PolicyRequest(action.meta, trajectory.instruction, trajectory.steps[:index], SamplingParams())


def trajectory_samples(
    trajectory: TrajectoryCompleted,
    advantage: float,
    encoder: PromptEncoder,
    turn_bonus: Sequence[float] = (),
) -> tuple[list[Sample], SampleCounts]:
    """One sample per model turn with response tokens, each carrying the trajectory's advantage plus its
    turn's bonus (`turn_bonuses`: weighted process rewards; none by default)."""
    samples: list[Sample] = []
    refused = empty = 0
    for index, step in enumerate(trajectory.steps):
        action = step.action
        if not action.token_ids:
            empty += 1
            continue
        prompt = encoder.encode(step_request(trajectory, index))
        if len(prompt) != action.prompt_tokens or not prompt:
            refused += 1
            continue
        bonus = turn_bonus[index] if index < len(turn_bonus) else 0.0
        samples.append(Sample(tuple(prompt), action.token_ids, action.logprobs, advantage + bonus))
    return samples, SampleCounts(len(samples), refused, empty)


def turn_bonuses(trajectory: TrajectoryCompleted, grades: Sequence[StepGraded], coef: float) -> list[float]:
    """Each turn's share of the process reward (`schemas.progress.process_rewards`: the change in pass
    rate its step made), times `coef`; 0 for a turn without one (not graded, or a submit, which changes
    no workspace)."""
    executed = sum(1 for step in trajectory.steps if step.result is not None)
    rewards = process_rewards(executed, grades)
    return [coef * (rewards[i] or 0.0) if i < len(rewards) else 0.0 for i in range(len(trajectory.steps))]


def group_samples(
    trajectories: Sequence[TrajectoryCompleted],
    advantages: Sequence[float],
    encoder: PromptEncoder,
    bonuses: Mapping[str, Sequence[float]] | None = None,
) -> tuple[list[Sample], SampleCounts]:
    """The samples of a group's trajectories; `bonuses` by episode id (`turn_bonuses`), where known."""
    samples: list[Sample] = []
    counts = SampleCounts()
    for trajectory, advantage in zip(trajectories, advantages, strict=True):
        bonus = (bonuses or {}).get(trajectory.meta.episode_id, ())
        more, more_counts = trajectory_samples(trajectory, advantage, encoder, bonus)
        samples += more
        counts += more_counts
    return samples, counts


def make_encoder(name: str, model_dir: Path | None) -> PromptEncoder:
    """The encoder `--prompt-encoder` names; the chat one needs the model folder's tokenizer."""
    if name == "bytes":
        return BytesPromptEncoder()
    if name == "chat":
        if model_dir is None:
            raise ValueError("the chat prompt encoder needs the model folder (its tokenizer)")
        # Imported only when chosen: it lives with the LLM policy and pulls in transformers' tokenizers.
        from transformers import AutoTokenizer

        from actors.rollout.llm import ChatPromptEncoder

        encoder: PromptEncoder = ChatPromptEncoder(AutoTokenizer.from_pretrained(str(model_dir)))
        return encoder
    raise ValueError(f"unknown prompt encoder {name!r} ({', '.join(PROMPT_ENCODERS)})")
