"""A simulated policy for benchmarks: no model, only how long a model would take and how long an episode runs.

`LatencyModel` decides, from an episode's seed alone, how many turns the episode runs (most a few, a share
of them `long_turns`, the long tail of agentic episodes: DeepSWE averages 65 steps) and how long each
turn's inference takes (a log-normal, clipped: a few turns far slower than the median). Being a function
of (seed, step) only, two systems that start episodes with the same seeds face exactly the same episodes,
whatever the order, process or host they run them in: what `trialog bench compare` needs to put the
synchronous loop and the pipeline side by side.

`SimulatedPolicy` answers a request with the model's action: a cheap real command (`echo STEP >>
steps.log`) for each turn, then submit. `answer` returns at once (the caller schedules it `delay` later,
so one process can hold many requests at once, as an inference server does); `sample`, the `Policy`
protocol, sleeps the delay first.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from actors.rollout.policy import Sample, byte_tokens, prompt_length, render_action
from schemas.actions import Action, RunCommand, Submit
from schemas.requests import PolicyRequest

STEPS_FILE = "steps.log"


@dataclass(frozen=True, slots=True)
class LatencyModel:
    """Turns per episode and seconds per turn, each a pure function of the episode's seed (and step)."""

    median_s: float = 0.5  # the log-normal's median step latency
    sigma: float = 1.0  # its shape: 1.0 puts 1 step in 100 above ten times the median
    max_s: float = 30.0  # a step never takes longer (the stream's policy timeout must stay above it)
    min_turns: int = 4
    max_turns: int = 16  # most episodes: uniform in [min_turns, max_turns]
    long_turns: int = 60
    long_share: float = 0.1  # this share of episodes runs `long_turns` instead

    def __post_init__(self) -> None:
        problems = [
            what
            for what, bad in (
                ("median must be a finite number of seconds above 0", not 0 < self.median_s < math.inf),
                ("sigma must be finite and >= 0", not 0 <= self.sigma < math.inf),
                ("max must be >= the median", not self.median_s <= self.max_s < math.inf),
                ("turns must be 1 <= min <= max", not 1 <= self.min_turns <= self.max_turns),
                ("long turns must be >= 1", self.long_turns < 1),
                ("long share must be in [0, 1]", not 0 <= self.long_share <= 1),
            )
            if bad
        ]
        if problems:
            raise ValueError("; ".join(problems))

    def turns(self, seed: int) -> int:
        """Commands the episode of `seed` runs before it submits."""
        rng = random.Random(_seed("turns", seed))
        if rng.random() < self.long_share:
            return self.long_turns
        return rng.randint(self.min_turns, self.max_turns)

    def step_latency(self, seed: int, step: int) -> float:
        """Seconds the policy takes to answer step `step` (the submit included) of the episode of `seed`."""
        rng = random.Random(_seed("latency", seed, step))
        return min(self.max_s, rng.lognormvariate(math.log(self.median_s), self.sigma))

    def episode_seconds(self, seed: int) -> float:
        """The policy's time over the whole episode: every turn and the submit."""
        return sum(self.step_latency(seed, step) for step in range(self.turns(seed) + 1))

    @property
    def most_steps(self) -> int:
        """The longest episode in steps (its turns and the submit): the episode's step budget."""
        return max(self.max_turns, self.long_turns) + 1

    @property
    def mean_step_s(self) -> float:
        """The mean of the log-normal (before the clip, which only lowers it)."""
        return self.median_s * math.exp(self.sigma**2 / 2)

    def spec(self) -> str:
        """The text `parse` reads back into this model."""
        return (
            f"median={self.median_s:g},sigma={self.sigma:g},max={self.max_s:g},"
            f"turns={self.min_turns}-{self.max_turns},long={self.long_turns},long-share={self.long_share:g}"
        )

    @classmethod
    def parse(cls, text: str) -> LatencyModel:
        """From `median=0.5,sigma=1,max=30,turns=4-16,long=60,long-share=0.1` (any subset; the rest default).
        ValueError names what is wrong."""
        given: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, eq, value = part.partition("=")
            if key not in SPEC_KEYS:
                raise ValueError(f"{part!r}: unknown key ({', '.join(SPEC_KEYS)})")
            if not eq or not value:
                raise ValueError(f"{part!r}: expected KEY=NUMBER (turns=MIN-MAX)")
            given[key] = value
        d = cls()
        low, _, high = given.get("turns", f"{d.min_turns}-{d.max_turns}").partition("-")
        try:
            return cls(
                median_s=float(given.get("median", d.median_s)),
                sigma=float(given.get("sigma", d.sigma)),
                max_s=float(given.get("max", d.max_s)),
                min_turns=int(low),
                max_turns=int(high or low),
                long_turns=int(given.get("long", d.long_turns)),
                long_share=float(given.get("long-share", d.long_share)),
            )
        except ValueError as exc:
            raise ValueError(f"{text!r}: {exc}") from None


SPEC_KEYS = ("median", "sigma", "max", "turns", "long", "long-share")


def _seed(*parts: object) -> int:
    """A 64-bit seed from `parts`, the same in every process (no hash randomization)."""
    text = ":".join(map(str, ("trialog-simulated", *parts)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def action_at(model: LatencyModel, seed: int, step: int) -> Action:
    """The simulated policy's action at `step`: a cheap real command per turn, then submit."""
    if step < model.turns(seed):
        return RunCommand(f"echo {step} >> {STEPS_FILE}")
    return Submit("simulated episode done")


@dataclass(frozen=True)
class SimulatedPolicy:
    """The `Policy` of a `LatencyModel`; seeded by the request's sampling seed (the episode's seed)."""

    model: LatencyModel
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    name: str = field(default="simulated")

    def delay(self, request: PolicyRequest) -> float:
        return self.model.step_latency(request.sampling.seed, request.meta.step)

    def answer(self, request: PolicyRequest) -> Sample:
        """The request's sample, at once (the caller waits `delay` first)."""
        action = action_at(self.model, request.sampling.seed, request.meta.step)
        response = render_action(action)
        tokens = byte_tokens(response)
        return Sample(action, response, tokens, (0.0,) * len(tokens), prompt_length(request))

    def sample(self, request: PolicyRequest) -> Sample:
        self.sleep(self.delay(request))
        return self.answer(request)
