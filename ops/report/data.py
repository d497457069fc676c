"""The figures of a run report, gathered from the run's log (pure: a `LoggedRun` in, a `ReportData` out).

Times are the events' `occurred_at_us`, taken once at their source. The stages of a step:

* **policy**: from the event before an `ActionProposed` (EpisodeStarted or the previous StepExecuted) to it,
  i.e. the request, the queue and the sampling;
* **sandbox**: from an `ActionProposed` to its `StepExecuted` (restore, exec, snapshot and the trip back);
* **verify**: from the submitting `ActionProposed` to `RewardAssigned` (grading in a fresh sandbox).

The sandbox's own time per step (`StepExecuted.duration_us`) is shown apart, by step index.

Tokens per second: the response tokens of every `ActionProposed` (its `token_ids`, what the policy
generated), counted in the minute since the run's first event in which the action was proposed, over the
seconds of that minute the run covered (the last minute is usually partial).

Staleness: the log records no "trajectory consumed" event, so a completed trajectory counts as consumed by
the learner when a policy version was published after it completed; its lag is the policy version current
when it completed minus the oldest version that sampled it (`min_policy_version`). Without any
`PolicyPublished` nothing was consumed, and the report says so.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from actors.guard.alerts import by_severity
from ops.runlog import EpisodeLog, LoggedRun
from schemas.alerts import Alert
from schemas.common import Verdict
from schemas.events import ActionProposed, EpisodeStarted, RewardAssigned, StepExecuted
from schemas.trajectories import TrajectoryCompleted

STAGES = ("policy", "sandbox", "verify")
TABLE_ROWS = 20
ALERT_ROWS = 50  # the most recent; `trialog alerts RUN` lists them all


@dataclass(frozen=True)
class EpisodeRow:
    episode: str
    task_id: str
    outcome: str  # completed | failed | in_flight
    detail: str  # reward and verdict, or failure class and reason
    duration_s: float
    steps: int


@dataclass(frozen=True)
class ReportData:
    run: str
    episodes: int
    completed: int
    failed: int
    in_flight: int
    first_us: int
    last_us: int
    mean_reward: float | None
    reward_by_version: list[tuple[int, float, int]] = field(default_factory=list)  # version, mean, count
    ended_per_minute: list[int] = field(default_factory=list)  # index: minutes since the first event
    tokens_per_second: list[float] = field(default_factory=list)  # generated; index: minutes, as above
    generated_tokens: int = 0
    stage_latency_s: dict[str, list[float]] = field(default_factory=dict)
    sandbox_by_step: list[tuple[int, float, int]] = field(default_factory=list)  # step, mean s, count
    failures: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    staleness: list[int] | None = None  # None: no trajectory consumed (no policy version published)
    policy_versions: int = 0
    slowest: list[EpisodeRow] = field(default_factory=list)
    failed_rows: list[EpisodeRow] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)  # the most recent ALERT_ROWS, oldest first
    alerts_total: int = 0
    alerts_by_severity: dict[str, int] = field(default_factory=dict)
    alerts_read: bool = True  # False: the run has no alerts topic (made before alerts existed)
    # Each grade's parts (RewardAssigned since v4): the outcome's share, each component's values by name,
    # and how many grades each reward configuration version composed (more than one: it changed mid-run).
    outcome_rewards: list[float] = field(default_factory=list)
    reward_components: dict[str, list[float]] = field(default_factory=dict)
    reward_configs: list[tuple[str, int]] = field(default_factory=list)  # version, grades; first seen first


def _outcome(episode: EpisodeLog) -> str:
    if episode.completed is not None:
        return "completed"
    return "failed" if episode.failed is not None else "in_flight"


def _row(episode: EpisodeLog) -> EpisodeRow:
    task = episode.task or ("", "")
    completed, failed = episode.completed, episode.failed
    if completed is not None:
        detail = f"reward {completed.reward:g} ({completed.verdict.value})"
    elif failed is not None:
        detail = f"{failed.failure.value}: {failed.reason}"
    else:
        detail = "not ended"
    duration_us = completed.duration_us if completed is not None else episode.last_us - episode.first_us
    return EpisodeRow(
        episode.episode_id, task[0], _outcome(episode), detail, duration_us / 1e6, len(episode.actions)
    )


def stage_latencies(episode: EpisodeLog) -> dict[str, list[float]]:
    """Seconds spent in each stage by each step of `episode` (see the module's docstring)."""
    out: dict[str, list[float]] = defaultdict(list)
    before: int | None = None  # time of the event the next policy call answers
    proposed: ActionProposed | None = None
    for logged in episode.events:
        event, at = logged.event, logged.event.meta.occurred_at_us
        if isinstance(event, EpisodeStarted):
            before = at
        elif isinstance(event, ActionProposed):
            if before is not None:
                out["policy"].append((at - before) / 1e6)
            proposed = event
        elif isinstance(event, StepExecuted):
            if proposed is not None and proposed.meta.step == event.meta.step:
                out["sandbox"].append((at - proposed.meta.occurred_at_us) / 1e6)
            before = at
        elif isinstance(event, RewardAssigned) and proposed is not None:
            out["verify"].append((at - proposed.meta.occurred_at_us) / 1e6)
    return out


def _sampling_version(episode: EpisodeLog) -> int | None:
    versions = [action.meta.policy_version for action in episode.actions]
    if versions:
        return max(versions)
    started = episode.started
    return started.meta.policy_version if started is not None else None


def _staleness(run: LoggedRun) -> list[int] | None:
    if not run.policies:
        return None
    published = sorted((p.meta.occurred_at_us, p.version) for p in run.policies)
    last_published_us = published[-1][0]
    lags = []
    for episode in run.episodes.values():
        trajectory = episode.trajectory
        if not isinstance(trajectory, TrajectoryCompleted):
            continue
        done_us = trajectory.meta.occurred_at_us
        if done_us > last_published_us:
            continue  # completed after the last update: not consumed yet
        current = max((version for at, version in published if at <= done_us), default=0)
        lags.append(max(current - trajectory.min_policy_version, 0))
    return lags


def tokens_per_second(tokens_by_minute: Mapping[int, int], first_us: int, last_us: int) -> list[float]:
    """Generated tokens per second in each minute since `first_us`: a minute's tokens over the seconds of
    it the run covered, at least one (a run of a few milliseconds has no meaningful rate; dividing by
    them would draw one absurd bar)."""
    span_s = (last_us - first_us) / 1e6
    minutes = max(tokens_by_minute, default=-1) + 1
    return [
        tokens_by_minute.get(minute, 0) / max(min(60.0, span_s - 60 * minute), 1.0)
        for minute in range(minutes)
    ]


def gather(run: LoggedRun, run_name: str, rows: int = TABLE_ROWS, *, alerts_read: bool = True) -> ReportData:
    episodes = [e for e in run.episodes.values() if e.events]
    first_us = min((e.first_us for e in episodes), default=0)
    last_us = max((e.last_us for e in episodes), default=0)
    rewards: dict[int, list[float]] = defaultdict(list)
    per_minute: Counter[int] = Counter()
    tokens_by_minute: Counter[int] = Counter()
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    by_step: dict[int, list[float]] = defaultdict(list)
    failures: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    outcomes: list[float] = []
    components: dict[str, list[float]] = defaultdict(list)
    configs: Counter[str] = Counter()
    for episode in sorted(episodes, key=lambda e: e.first_us):
        completed, failed = episode.completed, episode.failed
        if completed is not None:
            version = _sampling_version(episode)
            rewards[version if version is not None else 0].append(completed.reward)
            verdicts[completed.verdict.value] += 1
        if failed is not None:
            failures[failed.failure.value] += 1
        reward = episode.reward
        if reward is not None and reward.verdict is not Verdict.ERROR:
            outcomes.append(reward.outcome_reward if reward.outcome_reward is not None else reward.reward)
            for name, value in reward.components:
                components[name].append(value)
            if reward.versions is not None:
                configs[reward.versions.reward_config] += 1
        if completed is not None or failed is not None:
            per_minute[(episode.last_us - first_us) // 60_000_000] += 1
        for stage, values in stage_latencies(episode).items():
            stages[stage].extend(values)
        for action in episode.actions:
            tokens_by_minute[(action.meta.occurred_at_us - first_us) // 60_000_000] += len(action.token_ids)
        for executed in episode.executions:
            by_step[executed.meta.step].append(executed.duration_us / 1e6)
    all_rewards = [reward for values in rewards.values() for reward in values]
    ended = [_row(e) for e in episodes]
    minutes = max(per_minute, default=-1) + 1
    return ReportData(
        run=run_name,
        episodes=len(episodes),
        completed=sum(row.outcome == "completed" for row in ended),
        failed=sum(row.outcome == "failed" for row in ended),
        in_flight=sum(row.outcome == "in_flight" for row in ended),
        first_us=first_us,
        last_us=last_us,
        mean_reward=statistics.fmean(all_rewards) if all_rewards else None,
        reward_by_version=[(v, statistics.fmean(r), len(r)) for v, r in sorted(rewards.items())],
        ended_per_minute=[per_minute.get(minute, 0) for minute in range(minutes)],
        tokens_per_second=tokens_per_second(tokens_by_minute, first_us, last_us),
        generated_tokens=sum(tokens_by_minute.values()),
        stage_latency_s=stages,
        sandbox_by_step=[(s, statistics.fmean(d), len(d)) for s, d in sorted(by_step.items())],
        failures=dict(failures.most_common()),
        verdicts=dict(verdicts.most_common()),
        staleness=_staleness(run),
        policy_versions=len({p.version for p in run.policies}),
        slowest=sorted(
            (row for row in ended if row.outcome == "completed"), key=lambda r: (-r.duration_s, r.episode)
        )[:rows],
        failed_rows=sorted((row for row in ended if row.outcome == "failed"), key=lambda r: r.episode)[:rows],
        alerts=list(run.alerts.values())[-ALERT_ROWS:],
        alerts_total=len(run.alerts),
        alerts_by_severity=by_severity(list(run.alerts.values())),
        alerts_read=alerts_read,
        outcome_rewards=outcomes,
        reward_components={name: values for name, values in sorted(components.items())},
        reward_configs=list(configs.items()),  # in the order first seen (episodes by start)
    )
