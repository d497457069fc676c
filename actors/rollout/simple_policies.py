"""The non-neural policy plugins: `scripted` (for tests and benchmarks) and `random` (a seeded baseline).

Both are pure functions of the request, so a redelivered request gets the same answer (see `policy`).
Their token ids are the response's UTF-8 bytes; the log-probs put the log-probability of the choice made
on the first token and 0.0 on the rest, so that, as for a model, the response's log-probs sum to the
log-probability of the action under the behaviour policy (0.0 for a script: it had no choice).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from actors.rollout.policy import PolicyError, Sample, byte_tokens, parse_action, prompt_length, render_action
from actors.tasks.spec import Task, load_tasks
from schemas.actions import Action, ApplyPatch, RunCommand, Submit
from schemas.requests import PolicyRequest


def float32(value: float) -> float:
    """`value` as the wire carries it (log-probs are float32 in ActionProposed)."""
    packed: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return packed


def _sample(request: PolicyRequest, action: Action, logprob: float) -> Sample:
    response = render_action(action)
    tokens = byte_tokens(response)
    logprobs = tuple(float32(logprob) if i == 0 else 0.0 for i in range(len(tokens)))
    return Sample(action, response, tokens, logprobs, prompt_length(request))


# ---- scripted ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScriptedPolicy:
    """Plays a fixed list of actions per task id: action `step` at step `step`, then submit() once past it.

    A task without a script is refused (PolicyError `no_script`).
    """

    scripts: Mapping[str, tuple[Action, ...]]
    name: str = field(default="scripted")

    def sample(self, request: PolicyRequest) -> Sample:
        meta = request.meta
        script = self.scripts.get(meta.task_id)
        if script is None:
            raise PolicyError("no_script", f"the scripted policy has no actions for task {meta.task_id!r}")
        action = script[meta.step] if 0 <= meta.step < len(script) else Submit("script ended")
        return _sample(request, action, 0.0)

    @classmethod
    def from_json(cls, data: object) -> ScriptedPolicy:
        """From `{task id: [tool call, ...]}` (see `policy.parse_action`); ValueError names the problem."""
        if not isinstance(data, dict):
            raise ValueError("an action file holds one JSON object: {task id: [tool call, ...]}")
        scripts: dict[str, tuple[Action, ...]] = {}
        for task_id, calls in data.items():
            if not isinstance(calls, list) or not calls:
                raise ValueError(f"task {task_id!r}: a non-empty list of tool calls is expected")
            try:
                scripts[task_id] = tuple(parse_action(call) for call in calls)
            except ValueError as exc:
                raise ValueError(f"task {task_id!r}: {exc}") from None
        return cls(scripts)

    @classmethod
    def from_file(cls, path: Path) -> ScriptedPolicy:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: {exc}") from None
        try:
            return cls.from_json(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    @classmethod
    def solving(cls, tasks: Iterable[Task]) -> ScriptedPolicy:
        """The reference solution of each task: apply_patch(solution.patch), then submit()."""
        return cls({task.id: solution_script(task) for task in tasks})

    @classmethod
    def solving_folders(cls, roots: Sequence[Path]) -> ScriptedPolicy:
        return cls.solving(load_tasks(roots))

    def merged(self, other: ScriptedPolicy) -> ScriptedPolicy:
        """This policy's scripts, with `other`'s where both have one."""
        return ScriptedPolicy({**self.scripts, **other.scripts}, self.name)


def solution_script(task: Task) -> tuple[Action, ...]:
    return (ApplyPatch(task.patch_path.read_text(encoding="utf-8")), Submit())


# ---- random -----------------------------------------------------------------------------------------------

HARMLESS_COMMANDS = ("ls -la", "pwd", "cat *.py | head -n 40", "python3 --version", "git status 2>&1 | head")
SUBMIT_WEIGHT = 0.2


@dataclass(frozen=True)
class RandomPolicy:
    """A seeded random choice among a few harmless commands and submit().

    The draw depends only on `sampling.seed` and the step, so the same request always gets the same action
    (whatever the attempt, host or process), and episodes with the same seed act alike.
    """

    commands: tuple[str, ...] = HARMLESS_COMMANDS
    submit_weight: float = SUBMIT_WEIGHT
    name: str = field(default="random")

    def __post_init__(self) -> None:
        if not self.commands or not 0.0 < self.submit_weight < 1.0:
            raise ValueError("a random policy needs commands and a submit weight in (0, 1)")

    def choices(self) -> tuple[tuple[Action, float], ...]:
        each = (1.0 - self.submit_weight) / len(self.commands)
        runs: tuple[tuple[Action, float], ...] = tuple((RunCommand(c), each) for c in self.commands)
        return (*runs, (Submit(), self.submit_weight))

    def sample(self, request: PolicyRequest) -> Sample:
        choices = self.choices()
        rng = random.Random(seed_for(request.sampling.seed, request.meta.step))
        index = rng.choices(range(len(choices)), weights=[p for _, p in choices])[0]
        action, probability = choices[index]
        return _sample(request, action, math.log(probability))


def seed_for(seed: int, step: int) -> int:
    """A 64-bit seed from (seed, step), the same in every process (no hash randomization)."""
    return int.from_bytes(hashlib.sha256(f"trialog-random:{seed}:{step}".encode()).digest()[:8], "big")
