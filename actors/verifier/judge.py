"""A model judge: a language model, through a rollout generation backend, asked whether a change solves
its task. The `judge` component of a reward configuration (weight 0 by default).

The judge is shown the task's instruction and the change as a bounded unified diff, and asked to answer
yes or no; it samples `samples` one-word answers with fixed seeds (the same change gets the same score)
and the score is the share of answers that start with "yes". It reads text the policy wrote, so it can be
talked into a yes (a comment addressed to it, an instruction in a string): that is why it is optional and
weighed 0 by default, and why its score is recorded apart from the tests' verdict, never instead of it.
A grade the recheck composes again takes the judge's score as recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from actors.rollout.generation import GenerationBackend

QUESTION = (
    "You review a code change made to solve a task. Task:\n{instruction}\n\nThe change (unified diff):\n"
    "{diff}\n\nDoes this change solve the task? Answer with one word: yes or no."
)
NO_CHANGE = "(no file was changed)"


class Judge(Protocol):
    def __call__(self, instruction: str, diff: str) -> float:
        """The share of yes, in [0, 1]."""
        ...


@dataclass(frozen=True)
class ModelJudge:
    backend: GenerationBackend
    encode: Callable[[Sequence[dict[str, str]]], list[int]]  # a chat to prompt token ids
    decode: Callable[[Sequence[int]], str]
    samples: int = 8
    temperature: float = 1.0

    def __call__(self, instruction: str, diff: str) -> float:
        chat = [{"role": "user", "content": QUESTION.format(instruction=instruction, diff=diff or NO_CHANGE)}]
        prompt = self.encode(chat)
        answers = self.backend.generate(
            [prompt] * self.samples, max_new_tokens=3, temperature=self.temperature, seeds=range(self.samples)
        )
        return sum(is_yes(self.decode(a.token_ids)) for a in answers) / self.samples


def is_yes(text: str) -> bool:
    return text.strip().strip("\"'*.").lower().startswith("yes")
