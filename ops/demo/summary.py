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


@dataclass(frozen=True)
class DemoSummary:
    before: Evaluation
    training: Training
    after: Evaluation
    phases_s: dict[str, float] = field(default_factory=dict)
    report: str = ""
    traces: str = ""

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
        return (
            f"held-out pass rate {change}: {first.passed}/{first.episodes} with v{first.policy_version}, "
            f"{last.passed}/{last.episodes} with v{last.policy_version} (same tasks, same seeds; "
            f"{last.episodes} episodes each, so a difference of one or two episodes is within noise)"
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["before"]["pass_rate"] = self.before.pass_rate
        data["after"]["pass_rate"] = self.after.pass_rate
        data["verdict"] = self.verdict()
        return data
