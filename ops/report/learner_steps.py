"""What the report shows of training: the learner's steps, one per policy version, read from the
`stats.jsonl` the learner appends to (`learner.learner.Learner._report`), and the held-out pass rate of
the versions a demo evaluated (its `demo.json`, `ops.demo.summary.DemoSummary.to_json`).

Pure but for `read_stats` and `read_heldout`, which read one small file each. A stats file written before
the learner measured a figure (KL, entropy, advantages, the log-prob gap, the staleness histogram) still
reads: the figure is None there, and the page says it was not recorded rather than drawing a zero.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LearnerStep:
    """One training step: the version it published and the statistics of its PPO passes.

    The per-token figures are those of the step's last pass (`train` in the file), except the log-prob
    gap, which is the first pass's (`mismatch`): measured before the step changed the weights, it is the
    rollout/learner mismatch itself, not the step's own update."""

    version: int
    trajectories: int
    samples: int
    tokens: int  # response tokens trained on (the policy's own, not the prompt's)
    passes: int
    loss: float
    ratio_mean: float
    clip_fraction: float
    grad_norm: float  # before clipping
    seconds: float  # every pass's training time together: what the step cost
    pg_fraction: float | None = None
    approx_kl: float | None = None
    entropy: float | None = None
    advantage_mean: float | None = None
    advantage_std: float | None = None
    advantage_min: float | None = None
    advantage_max: float | None = None
    gap_mean: float | None = None
    gap_max: float | None = None
    staleness: Mapping[int, int] | None = None  # policy versions behind -> trajectories
    idle_fraction: float | None = None


@dataclass(frozen=True)
class LearnerStats:
    """The steps read from `path`; `exists` tells a file with no step yet from no file at all."""

    path: Path
    steps: tuple[LearnerStep, ...]
    exists: bool


@dataclass(frozen=True)
class HeldOutEvaluation:
    """One evaluation of a demo: the held-out tasks run with `policy_version` pinned."""

    label: str  # before | between | after
    policy_version: int
    passed: int
    episodes: int

    @property
    def pass_rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0


@dataclass(frozen=True)
class HeldOut:
    """The evaluations of the demo summary at `path`, in the order the demo ran them."""

    path: Path
    evaluations: tuple[HeldOutEvaluation, ...]
    verdict: str = ""  # the demo's own sentence about them


def _number(record: Mapping[str, Any], key: str, where: str) -> float:
    value = record.get(key)
    # bool is an int to Python, but a `true` where a loss belongs is a broken line, not a 1
    if isinstance(value, bool) or not isinstance(value, int | float):
        found = "missing" if value is None else f"{value!r}, not a number"
        raise ValueError(f"{where}{key} is {found}")
    return float(value)


def _integer(record: Mapping[str, Any], key: str, where: str) -> int:
    value = _number(record, key, where)
    if not value.is_integer():
        raise ValueError(f"{where}{key} is {value!r}, not a whole number")
    return int(value)


def _optional(record: Mapping[str, Any], key: str, where: str) -> float | None:
    return _number(record, key, where) if key in record else None


def _mapping(record: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    value = record.get(key)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where}{key} is {value!r}, not an object")
    return value


def _staleness(record: Mapping[str, Any]) -> dict[int, int] | None:
    """The step's histogram; from the per-group lists when the line predates `staleness_histogram`."""
    histogram = _mapping(record, "staleness_histogram", "")
    if histogram is not None:
        lags: dict[int, str] = {}
        for key in histogram:
            try:
                lags[int(key)] = key  # JSON keys are strings: the learner writes str(lag)
            except ValueError:
                raise ValueError(f"staleness_histogram has {key!r}, not a number of versions") from None
        return {lag: _integer(histogram, key, "staleness_histogram.") for lag, key in sorted(lags.items())}
    groups = record.get("staleness")
    if groups is None:
        return None
    if not isinstance(groups, list) or not all(
        isinstance(group, list) and all(isinstance(lag, int) and not isinstance(lag, bool) for lag in group)
        for group in groups
    ):
        raise ValueError(f"staleness is {groups!r}, not a list of lists of whole numbers")
    return dict(sorted(Counter(lag for group in groups for lag in group).items()))


def parse_step(record: Mapping[str, Any]) -> LearnerStep:
    """The step one decoded line of a stats file describes; a ValueError that names the bad field."""
    version, trajectories = _integer(record, "version", ""), _integer(record, "trajectories", "")
    train = _mapping(record, "train", "")
    if train is None:
        raise ValueError("train is missing")
    passes = record.get("passes")
    if passes is not None and (not isinstance(passes, list) or not all(isinstance(p, dict) for p in passes)):
        raise ValueError(f"passes is {passes!r}, not a list of objects")
    if passes:
        seconds = sum(_number(p, "seconds", f"passes[{i}].") for i, p in enumerate(passes))
    else:  # a line from before `passes`: one pass, the one `train` holds
        seconds = _number(train, "seconds", "train.")
    mismatch = _mapping(record, "mismatch", "") or {}
    return LearnerStep(
        version=version,
        trajectories=trajectories,
        samples=_integer(train, "samples", "train."),
        tokens=_integer(train, "tokens", "train."),
        passes=len(passes) if passes else 1,
        loss=_number(train, "loss", "train."),
        ratio_mean=_number(train, "ratio_mean", "train."),
        clip_fraction=_number(train, "clip_fraction", "train."),
        grad_norm=_number(train, "grad_norm", "train."),
        seconds=seconds,
        pg_fraction=_optional(train, "pg_fraction", "train."),
        approx_kl=_optional(train, "approx_kl", "train."),
        entropy=_optional(train, "entropy", "train."),
        advantage_mean=_optional(train, "advantage_mean", "train."),
        advantage_std=_optional(train, "advantage_std", "train."),
        advantage_min=_optional(train, "advantage_min", "train."),
        advantage_max=_optional(train, "advantage_max", "train."),
        gap_mean=_optional(mismatch, "mean", "mismatch."),
        gap_max=_optional(mismatch, "max", "mismatch."),
        staleness=_staleness(record),
        idle_fraction=_optional(record, "idle_fraction", ""),
    )


def parse_lines(lines: Iterable[str], source: str) -> list[LearnerStep]:
    """The steps of a stats file's lines, in file order; blank lines are skipped. A line that is not a
    step is a ValueError naming `source` and the line's number (from 1)."""
    steps = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
            steps.append(parse_step(record))
        except ValueError as exc:  # json.JSONDecodeError is one
            raise ValueError(f"{source}, line {number}: not a learner step ({exc})") from None
    return steps


def read_stats(path: Path) -> list[LearnerStep]:
    """The steps in the learner's stats file at `path`; [] when there is no such file (a run whose
    learner published nothing, or a report made on another machine)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:  # a ValueError that would not name the file
        raise ValueError(f"{path}: not UTF-8 text ({exc})") from None
    return parse_lines(text.splitlines(), str(path))


def staleness_histogram(steps: Sequence[LearnerStep]) -> dict[int, int]:
    """Trajectories trained, by how many policy versions behind they were, over every step (ascending;
    a lag between two seen ones that no trajectory had is there with 0, so the bars read as an axis)."""
    total: Counter[int] = Counter()
    for step in steps:
        total.update(step.staleness or {})
    if not total:
        return {}
    return {lag: total.get(lag, 0) for lag in range(min(total), max(total) + 1)}


def heldout_evaluations(summary: Mapping[str, Any]) -> tuple[HeldOutEvaluation, ...]:
    """The evaluations of a decoded demo summary: before, those between (a summary may have none), after."""
    between = summary.get("between", [])
    if not isinstance(between, list):
        raise ValueError(f"between is {between!r}, not a list")
    named = [
        ("before", summary.get("before")),
        *(("between", e) for e in between),
        ("after", summary.get("after")),
    ]
    evaluations = []
    for index, (label, evaluation) in enumerate(named):
        where = f"{label}." if label != "between" else f"between[{index - 1}]."
        if not isinstance(evaluation, dict):
            raise ValueError(f"{where.rstrip('.')} is {evaluation!r}, not an evaluation")
        evaluations.append(
            HeldOutEvaluation(
                label,
                _integer(evaluation, "policy_version", where),
                _integer(evaluation, "passed", where),
                _integer(evaluation, "episodes", where),
            )
        )
    return tuple(evaluations)


def read_heldout(path: Path) -> HeldOut:
    """The held-out evaluations of the demo summary (`demo.json`) at `path`; a ValueError naming the file
    when it is not one (an OSError when it cannot be read)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(summary, dict):
            raise ValueError(f"a JSON {type(summary).__name__}, not an object")
        evaluations = heldout_evaluations(summary)
    except ValueError as exc:
        raise ValueError(f"{path}: not a demo summary ({exc})") from None
    verdict = summary.get("verdict")
    return HeldOut(path, evaluations, verdict if isinstance(verdict, str) else "")
