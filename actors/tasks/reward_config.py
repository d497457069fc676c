"""The reward configuration: how the outcome rule and the other signals of an episode compose into the
scalar the learner trains on, read from a file whose canonical hash is its version.

    [outcome]                 # the brief's rule (actors.tasks.reward): the defaults
    tampered = -1.0
    build_failed = -0.5
    pass = 1.0
    partial_penalty = 0.2     # otherwise passed/total - partial_penalty

    [weights]                 # extra components, each weight in [-1, 1]; all 0 by default
    efficiency = 0.0          # 1 - steps used / the episode's step budget (the brief's calculate_reward)
    speed = 0.0               # 1 - the final test run's wall time / the task's timeout
    memory = 0.0              # 1 - the grading sandbox's peak memory / its memory limit
    no_leftovers = 0.0        # 1 if the tests left no process running, else 0
    small_change = 0.0        # 1 / (1 + lines changed / 50): 1 untouched, 0.5 at 50 lines
    lint = 0.0                # 1 / (1 + ruff findings the change added)  (verifier --static-signals)
    types = 0.0               # 1 / (1 + mypy errors the change added)    (verifier --static-signals)
    judge = 0.0               # a model judge's share of yes: does the change solve the task? (--judge-model)

Every component is a value in [0, 1], 1 the better; a component is measured and recorded whatever its
weight (a configuration can be judged on a run before it is used).

The scalar is the outcome reward plus the weighted components, except that a tampered or build-failed
episode gets its outcome reward alone: no bonus may soften a penalty the grader gave for cheating or a
broken build. Every component is kept apart in the result with the configuration's version, so a reward
can be recomputed and checked one component at a time, and a run whose configuration changed says so.

Pure: `parse` takes the file's text, `load` reads it; nothing else here touches the outside.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from actors.tasks import reward

COMPONENTS = ("efficiency", "speed", "memory", "no_leftovers", "small_change", "lint", "types", "judge")
# Components measured while the episode ran (timings, memory, processes alive at an instant): a recheck
# cannot reproduce them to the bit, so it composes with the recorded values and checks the others.
MEASURED_AT_RUN = frozenset({"speed", "memory", "no_leftovers", "judge"})
CHANGE_HALF_LINES = 50  # small_change is 0.5 at this many lines added and removed
OUTCOME_KEYS = ("tampered", "build_failed", "pass", "partial_penalty")


class RewardConfigError(ValueError):
    """A reward configuration that cannot be used: the message names the key and what is wrong."""


@dataclass(frozen=True)
class RewardConfig:
    tampered: float = reward.TAMPERED_REWARD
    build_failed: float = reward.BUILD_FAILED_REWARD
    passed: float = reward.PASS_REWARD
    partial_penalty: float = reward.PARTIAL_PENALTY
    weights: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def canonical(self) -> dict[str, Any]:
        """What the version hashes: every value, zero weights left out (a weight of 0 changes nothing)."""
        return {
            "outcome": {
                "tampered": self.tampered, "build_failed": self.build_failed, "pass": self.passed,
                "partial_penalty": self.partial_penalty,
            },
            "weights": {name: w for name, w in sorted(self.weights.items()) if w != 0.0},
        }  # fmt: skip

    @property
    def version(self) -> str:
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(b"trialog-reward-config-v1\0" + text.encode()).hexdigest()

    def outcome_only(self) -> RewardConfig:
        """This configuration's outcome rule with no component weighed (what a canary is graded by)."""
        return dataclasses.replace(self, weights=MappingProxyType({}))

    def outcome_reward(self, verdict: reward.Verdict, passed: int, total: int) -> float:
        """The outcome rule with this configuration's constants."""
        if verdict is reward.Verdict.TAMPERED:
            return self.tampered
        if verdict is reward.Verdict.BUILD_FAILED:
            return self.build_failed
        if verdict is reward.Verdict.PASS:
            return self.passed
        if verdict is reward.Verdict.ERROR or not total:
            return 0.0  # not trainable anyway (`Grade.trainable`)
        return passed / total - self.partial_penalty


@dataclass(frozen=True)
class Composed:
    """A reward and what it is made of: the outcome's and each weighted component's share."""

    reward: float
    outcome: float
    components: Mapping[str, float]  # name -> the component's value (before its weight)
    config_version: str


def efficiency(steps_used: int, step_budget: int) -> float:
    """1 for an episode that needed no step, 0 for one that used its whole budget."""
    if step_budget < 1 or steps_used < 0:
        raise ValueError(f"steps used {steps_used} of a budget of {step_budget}")
    return max(0.0, 1.0 - steps_used / step_budget)


def speed(wall_s: float, timeout_s: float) -> float:
    """1 for tests that took no time, 0 for a run that used the whole timeout (or more)."""
    if timeout_s <= 0 or wall_s < 0:
        raise ValueError(f"a wall time of {wall_s} s against a timeout of {timeout_s} s")
    return max(0.0, 1.0 - wall_s / timeout_s)


def memory(peak_bytes: int, limit_bytes: int) -> float:
    """1 for no memory used, 0 at the sandbox's limit."""
    if limit_bytes <= 0 or peak_bytes < 0:
        raise ValueError(f"a peak of {peak_bytes} bytes against a limit of {limit_bytes}")
    return max(0.0, 1.0 - peak_bytes / limit_bytes)


def no_leftovers(left_running: int) -> float:
    return 1.0 if left_running == 0 else 0.0


def small_change(lines: int) -> float:
    if lines < 0:
        raise ValueError(f"{lines} lines changed")
    return 1.0 / (1.0 + lines / CHANGE_HALF_LINES)


def clean(new_findings: int) -> float:
    """1 for a change that added no finding, 0.5 for one, falling towards 0 (lint, types)."""
    if new_findings < 0:
        raise ValueError(f"{new_findings} new findings")
    return 1.0 / (1.0 + new_findings)


def compose(
    config: RewardConfig, verdict: reward.Verdict, passed: int, total: int, components: Mapping[str, float]
) -> Composed:
    """The scalar of one episode. `components` must give every component the configuration weighs, unless
    the verdict is a penalty or an error, whose reward is the outcome's alone."""
    outcome = config.outcome_reward(verdict, passed, total)
    penalised = verdict in (reward.Verdict.TAMPERED, reward.Verdict.BUILD_FAILED, reward.Verdict.ERROR)
    missing = sorted(name for name, w in config.weights.items() if w and name not in components)
    if missing and not penalised:
        raise ValueError(f"the reward configuration weighs {', '.join(missing)}, which was not measured")
    extra = 0.0 if penalised else sum(w * components.get(name, 0.0) for name, w in config.weights.items())
    return Composed(outcome + extra, outcome, MappingProxyType(dict(components)), config.version)


DEFAULT = RewardConfig()


def parse(text: str, source: str = "the reward configuration") -> RewardConfig:
    """A configuration from TOML text; every key checked, nothing unknown accepted."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RewardConfigError(f"{source}: not TOML ({exc})") from None
    unknown = sorted(set(data) - {"outcome", "weights"})
    if unknown:
        raise RewardConfigError(f"{source}: unknown section(s) {', '.join(unknown)} (outcome, weights)")
    outcome = _table(data.get("outcome", {}), "outcome", source)
    weights = _table(data.get("weights", {}), "weights", source)
    if strange := sorted(set(outcome) - set(OUTCOME_KEYS)):
        raise RewardConfigError(f"{source}: unknown key outcome.{strange[0]} ({', '.join(OUTCOME_KEYS)})")
    if strange := sorted(set(weights) - set(COMPONENTS)):
        raise RewardConfigError(f"{source}: unknown component weights.{strange[0]} ({', '.join(COMPONENTS)})")
    for name, value in weights.items():
        if abs(value) > 1.0:
            raise RewardConfigError(f"{source}: weights.{name} = {value} is outside [-1, 1]")
    return RewardConfig(
        tampered=outcome.get("tampered", DEFAULT.tampered),
        build_failed=outcome.get("build_failed", DEFAULT.build_failed),
        passed=outcome.get("pass", DEFAULT.passed),
        partial_penalty=outcome.get("partial_penalty", DEFAULT.partial_penalty),
        weights=MappingProxyType(dict(sorted(weights.items()))),
    )


def load(path: Path) -> RewardConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RewardConfigError(f"cannot read the reward configuration {path}: {exc.strerror}") from None
    return parse(text, str(path))


def _table(value: object, name: str, source: str) -> dict[str, float]:
    if not isinstance(value, dict):
        raise RewardConfigError(f"{source}: [{name}] must be a table")
    numbers: dict[str, float] = {}
    for key, item in value.items():
        # bool is an int in Python: `true` is not a reward
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise RewardConfigError(f"{source}: {name}.{key} = {item!r} is not a finite number")
        numbers[key] = float(item)
    return numbers
