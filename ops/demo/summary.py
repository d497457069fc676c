"""What a demo measured, and the honest sentence about it (pure: no Kafka, no clock).

An evaluation is a run of the held-out tasks with one policy version pinned, the tasks in turn and the
same seeds for every version, so the two evaluations differ only in the weights. Its pass rate counts
every episode the evaluation asked for: an episode that failed (step limit, invalid action, timeout) is a
miss, not left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from actors.scheduler.status import RunStatus
from ops.paired import Outcomes, Paired

Sample = tuple[str, int]  # (task id, sampling seed): the same for every version an evaluation asks


SIGNIFICANT = 0.05  # the p-value under which the verdict calls a change unlikely to be chance


@dataclass(frozen=True)
class Evaluation:
    run: str
    policy_version: int
    episodes: int  # asked for
    passed: int
    completed: int
    failed_by_class: dict[str, int]
    mean_reward: float  # over every episode asked for; a failed one counts 0
    seconds: float
    # (task, seed, passed) of every episode drawn, sorted: what pairs two versions sample by sample
    samples: tuple[tuple[str, int, bool], ...] = ()

    @property
    def pass_rate(self) -> float:
        return self.passed / self.episodes if self.episodes else 0.0

    def line(self) -> str:
        failed = sum(self.failed_by_class.values())
        return (
            f"v{self.policy_version}: passed {self.passed}/{self.episodes} ({self.pass_rate:.0%}), "
            f"mean reward {self.mean_reward:.3f}, completed {self.completed}, failed {failed} "
            f"{self.failed_by_class or ''} [{self.seconds:.0f} s]"
        ).rstrip()


def evaluation(status: RunStatus, *, policy_version: int, episodes: int, seconds: float) -> Evaluation:
    """The evaluation a finished run's status shows."""
    passed = sum(1 for _reward, verdict in status.completed.values() if verdict == "pass")
    samples = sorted(
        (task, seed, status.completed.get(episode, (0.0, ""))[1] == "pass")
        for episode, (task, seed) in status.drawn.items()
    )
    by_class: dict[str, int] = {}
    for failure in status.failed.values():
        by_class[failure] = by_class.get(failure, 0) + 1
    total_reward = sum(reward for reward, _verdict in status.completed.values())
    return Evaluation(
        run=status.run_id,
        policy_version=policy_version,
        episodes=episodes,
        passed=passed,
        completed=len(status.completed),
        failed_by_class=dict(sorted(by_class.items())),
        mean_reward=total_reward / episodes if episodes else 0.0,
        seconds=seconds,
        samples=tuple(samples),
    )


def paired(before: Evaluation, after: Evaluation) -> Paired:
    """Gains and losses of `after` against `before` on the samples either drew (a sample one of them did
    not draw counts as a miss there, as an episode that failed does)."""
    first = {(task, seed): passed for task, seed, passed in before.samples}
    last = {(task, seed): passed for task, seed, passed in after.samples}
    keys = sorted(first.keys() | last.keys())
    return Paired.of(
        Outcomes(tuple(first.get(key, False) for key in keys)),
        Outcomes(tuple(last.get(key, False) for key in keys)),
    )


@dataclass(frozen=True)
class Training:
    run: str
    seconds: float
    episodes_ended: int
    completed: int
    passed: int
    failed_by_class: dict[str, int]
    versions: list[int]  # published, in order
    trajectories_trained: int
    sampled_tokens: int = 0  # the policy's response tokens in the completed trajectories
    # where the minutes went: CPU and runnable share per process group (`ops.demo.profile.Profile`)
    profile: dict[str, Any] = field(default_factory=dict)
    learner_step_s: list[float] = field(default_factory=list)  # each training step's seconds, in order

    @property
    def tokens_per_s(self) -> float:
        return self.sampled_tokens / self.seconds if self.seconds else 0.0

    def lines(self) -> list[str]:
        """What the training phase cost, for the console: throughput, learner steps, the profile."""
        steps = sorted(self.learner_step_s)
        median = f"median {steps[len(steps) // 2]:.1f} s" if steps else "none"
        return [
            f"generation: {self.sampled_tokens} response tokens in {self.seconds:.0f} s "
            f"({self.tokens_per_s:.1f} per s, every episode in flight together)",
            f"learner steps: {len(steps)}, {median}",
            *self.profile.get("lines", []),
        ]


@dataclass(frozen=True)
class DemoSummary:
    before: Evaluation
    training: Training
    after: Evaluation
    phases_s: dict[str, float] = field(default_factory=dict)
    report: str = ""
    traces: str = ""
    between: tuple[Evaluation, ...] = ()  # versions evaluated between the first and the last, in order

    @property
    def curve(self) -> list[Evaluation]:
        """Every evaluation by policy version: the held-out pass rate's curve."""
        return [self.before, *self.between, self.after]

    def verdict(self) -> str:
        """One honest sentence: did the held-out pass rate change between the first and last version?"""
        first, last = self.before, self.after
        if last.policy_version == first.policy_version:
            return (
                f"no new policy version was published during training, so v{first.policy_version} was "
                "evaluated twice; nothing can be said about learning"
            )
        change = (
            "rose"
            if last.passed > first.passed
            else "fell"
            if last.passed < first.passed
            else "did not change"
        )
        pairs = paired(first, last)
        chance = "unlikely" if pairs.p_value < SIGNIFICANT else "not unlikely"
        return (
            f"held-out pass rate {change}: {first.passed}/{first.episodes} ({first.pass_rate:.0%}) with "
            f"v{first.policy_version}, {last.passed}/{last.episodes} ({last.pass_rate:.0%}) with "
            f"v{last.policy_version}; on the same (task, seed) samples {pairs.line()}: a split this uneven "
            f"is {chance} to be chance"
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for name, result in (("before", self.before), ("after", self.after)):
            data[name]["pass_rate"] = result.pass_rate
            del data[name]["samples"]  # long; the pairs are summed up under "paired"
        data["between"] = [
            {k: v for k, v in asdict(e).items() if k != "samples"} | {"pass_rate": e.pass_rate}
            for e in self.between
        ]
        data["curve"] = [
            {"policy_version": e.policy_version, "passed": e.passed, "episodes": e.episodes}
            for e in self.curve
        ]
        pairs = paired(self.before, self.after)
        data["paired"] = {"gained": pairs.gained, "lost": pairs.lost, "p_value": pairs.p_value}
        data["verdict"] = self.verdict()
        return data
