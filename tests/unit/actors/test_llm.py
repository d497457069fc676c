"""The LLM policy: prompt encoding (chat template, cap), seeding, and replies turned into actions."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from actors.rollout.generation import Generation
from actors.rollout.llm import ChatPromptEncoder, LlmPolicy, end_of_turn, sampler_seed
from actors.rollout.scaffold import messages
from actors.rollout.torch_backend import TorchBackend
from actors.rollout.worker import RolloutWorker
from schemas.actions import InvalidReply, RunCommand, WriteFile
from schemas.common import Output
from schemas.events import ActionProposed, StepExecuted, StepRecord
from schemas.requests import PolicyRequest, SamplingParams

from .requests import fixed_origin, request_meta
from .tiny_lm import IM_END, byte_tokenizer, tiny_llama

TOKENIZER = byte_tokenizer()


def _history(steps: int, stdout: str = "x" * 200) -> tuple[StepRecord, ...]:
    records = []
    for step in range(steps):
        meta = request_meta(step=step)
        proposed = ActionProposed(meta, RunCommand(f"cmd {step}"), f"run: cmd {step}", 10, (1,), (-0.1,), 1)
        executed = StepExecuted(meta, 0, Output(f"output of step {step}\n{stdout}"), Output(""), False, 1)
        records.append(StepRecord(proposed, executed))
    return tuple(records)


def _request(
    steps: int = 0, *, seed: int = 7, episode: str = "ep-1", max_tokens: int = 1024
) -> PolicyRequest:
    meta = request_meta(step=steps, episode=episode)
    return PolicyRequest(
        meta, "Fix add() in calc.py.", _history(steps), SamplingParams(seed=seed, max_tokens=max_tokens)
    )


def test_the_prompt_is_the_chat_template_of_the_scaffold_messages() -> None:
    request = _request(2)
    ids = ChatPromptEncoder(TOKENIZER).encode(request)
    text = TOKENIZER.decode(ids)
    expected = TOKENIZER.apply_chat_template(messages(request), tokenize=False, add_generation_prompt=True)
    assert text == expected and text.endswith("<|im_start|>assistant\n")


def test_a_long_episode_keeps_the_newest_steps_and_says_how_many_were_cut() -> None:
    request = _request(12)
    full = ChatPromptEncoder(TOKENIZER, max_prompt_tokens=100_000).encode(request)
    cap = len(full) // 2
    ids = ChatPromptEncoder(TOKENIZER, max_prompt_tokens=cap).encode(request)
    assert len(ids) <= cap
    text = TOKENIZER.decode(ids)
    assert "Fix add() in calc.py." in text and "output of step 11" in text  # the task and the newest step
    assert "output of step 0\n" not in text
    cut = next(n for n in range(12) if f"output of step {n}\n" in text)
    assert f"(The first {cut} step(s) are not shown: the prompt is limited to {cap} tokens.)" in text


def test_an_instruction_too_long_for_the_cap_is_shortened() -> None:
    request = dataclasses.replace(_request(1), instruction="word " * 2000)
    ids = ChatPromptEncoder(TOKENIZER, max_prompt_tokens=1500).encode(request)
    assert len(ids) <= 1500 and "(The task text is cut here.)" in TOKENIZER.decode(ids)


def test_encoding_is_deterministic_and_the_same_for_a_second_encoder() -> None:
    request = _request(5)
    assert ChatPromptEncoder(TOKENIZER, 2000).encode(request) == ChatPromptEncoder(
        byte_tokenizer(), 2000
    ).encode(request)


def test_the_sampler_seed_depends_on_seed_episode_and_step_only() -> None:
    base = sampler_seed(7, "ep-1", 3)
    assert base == sampler_seed(7, "ep-1", 3)
    assert (
        len({base, sampler_seed(8, "ep-1", 3), sampler_seed(7, "ep-2", 3), sampler_seed(7, "ep-1", 4)}) == 4
    )
    assert 0 <= base < 2**63


class Scripted:
    """A backend that replies with fixed texts, recording what it was asked."""

    def __init__(self, replies: Sequence[str]) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, object]] = []

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: object) -> list[Generation]:
        self.calls.append({"prompts": [list(p) for p in prompts], **kwargs})
        out = []
        for _ in prompts:
            ids = tuple(TOKENIZER.encode(self.replies.pop(0) + IM_END, add_special_tokens=False))
            out.append(Generation(ids, tuple(-0.5 for _ in ids), "stop"))
        return out


def _policy(backend: object, version: int | None = 9) -> LlmPolicy:
    return LlmPolicy(ChatPromptEncoder(TOKENIZER), backend, TOKENIZER, version, max_new_tokens=64)  # type: ignore[arg-type]


def test_a_reply_becomes_its_action_with_tokens_logprobs_and_the_prompt_length() -> None:
    backend = Scripted(["```python\n# calc.py\nx = 1\n```"])
    request = _request(1, max_tokens=200)
    sample = _policy(backend).sample(request)
    assert sample.action == WriteFile("calc.py", b"x = 1\n")
    assert sample.response == "```python\n# calc.py\nx = 1\n```"  # special tokens are not part of the text
    assert sample.token_ids[-1] == TOKENIZER.eos_token_id and len(sample.logprobs) == len(sample.token_ids)
    assert sample.prompt_tokens == len(ChatPromptEncoder(TOKENIZER).encode(request))
    assert sample.policy_version == 9
    (call,) = backend.calls
    assert call["max_new_tokens"] == 64 and call["seeds"] == [sampler_seed(7, "ep-1", 1)]


def test_a_reply_without_an_action_is_an_invalid_reply_not_an_error() -> None:
    sample = _policy(Scripted(["I am not sure what to do."])).sample(_request())
    assert isinstance(sample.action, InvalidReply)
    assert "no action" in sample.action.error and sample.action.reply == "I am not sure what to do."


def test_the_worker_records_version_logprobs_and_prompt_length_in_action_proposed() -> None:
    worker = RolloutWorker(_policy(Scripted(["run: ls"])), fixed_origin())
    answer = worker.handle(_request())
    assert answer.action == RunCommand("ls") and answer.meta.policy_version == 9
    assert answer.logprobs == tuple(-0.5 for _ in answer.token_ids) and answer.prompt_tokens > 100


def test_a_batch_is_answered_in_order_grouped_by_sampling_parameters() -> None:
    backend = Scripted(["run: a", "run: b", "run: c"])
    requests = [_request(episode="e1"), _request(episode="e2", max_tokens=8), _request(episode="e3")]
    answers = RolloutWorker(_policy(backend), fixed_origin()).handle_batch(requests)
    assert [a.action for a in answers if isinstance(a, ActionProposed)] == [RunCommand(c) for c in "acb"]
    assert [len(c["prompts"]) for c in backend.calls] == [2, 1]  # type: ignore[arg-type]
    assert [c["max_new_tokens"] for c in backend.calls] == [64, 8]


def test_each_batch_logs_its_size_and_tokens(caplog: pytest.LogCaptureFixture) -> None:
    backend = Scripted(["run: a", "run: b"])
    requests = [_request(episode="e1"), _request(episode="e2")]
    with caplog.at_level("INFO", logger="actors.rollout.worker"):
        answers = RolloutWorker(_policy(backend), fixed_origin()).handle_batch(requests)
    tokens = sum(len(a.token_ids) for a in answers if isinstance(a, ActionProposed))
    assert tokens > 0
    assert any(r.getMessage().startswith(f"batch of 2: {tokens} tokens in ") for r in caplog.records)


def test_a_real_tiny_model_answers_the_same_request_alike_alone_or_in_a_batch() -> None:
    policy = _policy(TorchBackend(tiny_llama(), eos_token_id=TOKENIZER.eos_token_id), None)
    policy.max_new_tokens = 12
    requests = [_request(0, episode=f"ep-{i}") for i in range(3)]
    alone = [policy.sample(r) for r in requests]
    batched = policy.sample_batch(requests)
    assert [s.token_ids for s in batched] == [s.token_ids for s in alone]
    for a, b in zip(alone, batched, strict=True):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
        assert isinstance(a.action, InvalidReply)  # random weights write no action, and that is a step
    assert len({s.token_ids for s in alone}) == 3  # each episode has its own seed


def test_the_learner_rebuilds_each_steps_prompt_from_the_trajectory_alone() -> None:
    encoder = ChatPromptEncoder(TOKENIZER, 3000)
    steps = _history(4)
    for index in range(4):
        request = PolicyRequest(
            request_meta(step=index), "Fix add() in calc.py.", steps[:index], SamplingParams()
        )
        assert encoder.encode_history("Fix add() in calc.py.", steps[:index]) == encoder.encode(request)


def test_the_turn_ends_at_im_end_even_when_the_tokenizer_names_another_eos() -> None:
    tokenizer = byte_tokenizer()
    tokenizer.eos_token = "<|im_start|>"  # what the tokenizer converted from SmolLM2's GGUF file says
    assert end_of_turn(tokenizer) == tokenizer.convert_tokens_to_ids(IM_END)
