"""The run's alert rules: a pure engine over decoded records and metric samples (topic `alerts`).

`AlertEngine.observe(record)` folds the records of the run's topics (`FOLLOWED`) and returns the alerts
they raise; `tick(now_us)` evaluates the rules that fire on silence (the learner idle, a burst of dead
letters over); `sample(metrics, now_us)` folds one reading of the run's metrics (consumer lag per group,
sandbox acquire latency). Nothing here reads a clock, Kafka or the network: record rules take their time
from the records (`occurred_at_us`), the others from the caller, and ids come from the `Origin`'s id
source. The guard process hosts the engine and hands its alerts to the sinks (`actors.guard.sinks`).

Rules (each one's thresholds and windows in `AlertSettings`, each can be disabled by name):

| rule | severity | fires when | labels |
| --- | --- | --- | --- |
| reward_collapse | critical | mean reward of the last N trajectories fell below that of the M before | |
| reward_jump | warning | ... rose above it (a sudden jump is a reward hack as often as progress) | |
| failure_rate | warning | a failure class's share of the last W ended episodes is above the rate | class |
| dead_letters | warning | a dead letter arrived (one alert per burst: quiet for Q seconds ends it) | reason |
| canary_failed | critical | a canary was graded wrong (`CanaryGraded.ok` false) | task, case |
| version_changed | warning | a grade named a version unlike the pin (`VersionChanged`) | component, seen |
| learner_stale | warning | a share of the last W trajectories lag the latest policy by more than K | |
| learner_idle | warning | no `PolicyPublished` for T seconds while trajectories keep arriving | |
| consumer_lag | warning | a consumer group's lag is above a floor and grew over the last K samples | group |
| acquire_latency | warning | p95 sandbox acquire time over a window is above a threshold | |

De-duplication: a rule with labels is a *condition*; it raises one alert when it becomes true and none
while it stays true; once false again it is re-armed. One-off facts (a version change) raise one alert per
distinct labels. Restarting: feed the run's `alerts` topic to `observe` first, then the other topics from
their beginning: each alert already in the log stands for one raising of its (rule, labels), so the
replay does not raise it again (metric rules are not replayed, and their past alerts are not counted).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from schemas.alerts import Alert, Severity
from schemas.canaries import CanaryGraded
from schemas.common import RecordMeta
from schemas.deadletter import DeadLetter
from schemas.origin import Origin
from schemas.publications import PolicyPublished
from schemas.run_control import VersionChanged
from schemas.topics import (
    ALERTS,
    CANARY_GRADES,
    DEADLETTER,
    POLICY_VERSIONS,
    RUN_CONTROL,
    TRAJECTORIES_COMPLETED,
    TRAJECTORIES_FAILED,
    Topic,
)
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

FOLLOWED: tuple[Topic, ...] = (
    ALERTS,  # first, on a restart: what was raised already
    TRAJECTORIES_COMPLETED,
    TRAJECTORIES_FAILED,
    DEADLETTER,
    POLICY_VERSIONS,
    RUN_CONTROL,
    CANARY_GRADES,
)
"""The topics whose records `AlertEngine.observe` reads (others are ignored): the ended episodes come from
the trajectories topics, not from `episode.events`, which is far larger and says nothing more here."""

US = 1_000_000


class Rule(StrEnum):
    REWARD_COLLAPSE = "reward_collapse"
    REWARD_JUMP = "reward_jump"
    FAILURE_RATE = "failure_rate"
    DEAD_LETTERS = "dead_letters"
    CANARY_FAILED = "canary_failed"
    VERSION_CHANGED = "version_changed"
    LEARNER_STALE = "learner_stale"
    LEARNER_IDLE = "learner_idle"
    CONSUMER_LAG = "consumer_lag"
    ACQUIRE_LATENCY = "acquire_latency"


SEVERITY: Mapping[Rule, Severity] = {
    Rule.REWARD_COLLAPSE: Severity.CRITICAL,
    Rule.REWARD_JUMP: Severity.WARNING,
    Rule.FAILURE_RATE: Severity.WARNING,
    Rule.DEAD_LETTERS: Severity.WARNING,
    Rule.CANARY_FAILED: Severity.CRITICAL,
    Rule.VERSION_CHANGED: Severity.WARNING,
    Rule.LEARNER_STALE: Severity.WARNING,
    Rule.LEARNER_IDLE: Severity.WARNING,
    Rule.CONSUMER_LAG: Severity.WARNING,
    Rule.ACQUIRE_LATENCY: Severity.WARNING,
}
METRIC_RULES = frozenset({Rule.CONSUMER_LAG, Rule.ACQUIRE_LATENCY})
"""Rules over metric samples: not replayed from the log, so their past alerts are not counted on restart."""


@dataclass(frozen=True, slots=True)
class AlertSettings:
    """Every rule's thresholds and windows. A threshold of None turns that test off; `disabled` names rules
    that never fire. The defaults suit a run of thousands of episodes a day on rewards in [-1, 1]."""

    disabled: frozenset[Rule] = frozenset()
    # reward_collapse / reward_jump: the mean of the last `reward_recent` completed trajectories against the
    # mean of the `reward_baseline` before them (both windows full before either rule speaks); the alert's
    # value is the change of the mean. A change
    # fires when it is at least `*_abs` and, when `*_rel` is set, at least that fraction of |baseline|
    # (both given: both must hold, so a small baseline's relative noise alone never fires).
    reward_recent: int = 50
    reward_baseline: int = 200
    reward_drop_abs: float | None = 0.3
    reward_drop_rel: float | None = None
    reward_rise_abs: float | None = 0.4
    reward_rise_rel: float | None = None
    # failure_rate: per failure class, its share of the last `failure_window` ended episodes (completed or
    # failed) above `failure_rate`, once `failure_min_episodes` have ended. Aborted episodes are an
    # operator's doing, not a fault: ignored by default.
    failure_window: int = 100
    failure_rate: float = 0.2
    failure_min_episodes: int = 20
    failure_ignored: frozenset[str] = frozenset({"aborted"})
    # dead_letters: a burst ends after `deadletter_quiet_s` without a dead letter of that reason.
    deadletter_quiet_s: float = 600.0
    # learner_stale: a trajectory is stale when the latest published policy version minus its
    # `min_policy_version` is above `stale_versions`; fires when at least `stale_share` of the last
    # `stale_window` trajectories are.
    stale_versions: int = 4
    stale_window: int = 20
    stale_share: float = 0.5
    # learner_idle: no PolicyPublished for `idle_s` since the last one (or since the first trajectory when
    # none was published yet) while at least `idle_min_trajectories` completed in that time.
    idle_s: float = 1800.0
    idle_min_trajectories: int = 8
    # consumer_lag: a group's lag above `lag_floor` records that rose at every one of the last
    # `lag_samples` samples; it clears when under the floor again or below its value `lag_samples` ago.
    lag_floor: int = 1000
    lag_samples: int = 5
    # acquire_latency: p95 of the sandbox acquire time over `acquire_window_s` above `acquire_p95_s`, from
    # at least `acquire_min_count` acquires in the window (the p95 is a histogram bucket's upper bound).
    acquire_window_s: float = 300.0
    acquire_p95_s: float = 5.0
    acquire_min_count: int = 20

    def __post_init__(self) -> None:
        for name in ("reward_recent", "reward_baseline", "failure_window", "stale_window", "lag_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"AlertSettings.{name} must be at least 1")
        if self.lag_samples < 2:
            raise ValueError("AlertSettings.lag_samples must be at least 2 (growth needs two samples)")
        for name in ("failure_rate", "stale_share"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"AlertSettings.{name} must be above 0 and at most 1")

    def on(self, rule: Rule) -> bool:
        return rule not in self.disabled


# -- metrics (what a reading of the run's metrics holds) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Histogram:
    """A cumulative histogram as Prometheus serves it: `counts[i]` observations at or below `bounds[i]`
    (the last bound is +inf), since the process started."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]

    @property
    def count(self) -> int:
        return self.counts[-1] if self.counts else 0

    def since(self, earlier: Histogram | None) -> Histogram:
        """The observations after `earlier` (the same process read before); all of them when the process
        restarted meanwhile (a count went down) or the buckets differ."""
        if (
            earlier is None
            or earlier.bounds != self.bounds
            or any(now < then for now, then in zip(self.counts, earlier.counts, strict=True))
        ):
            return self
        return Histogram(self.bounds, tuple(a - b for a, b in zip(self.counts, earlier.counts, strict=True)))

    def quantile(self, q: float) -> float:
        """The upper bound of the bucket holding the `q` quantile (+inf when past the last finite bound);
        nan without observations."""
        total = self.count
        if total == 0:
            return math.nan
        rank = q * total
        for bound, cumulative in zip(self.bounds, self.counts, strict=True):
            if cumulative >= rank:
                return bound
        return math.inf


def merge(histograms: Iterable[Histogram]) -> Histogram | None:
    """The sum of histograms with the same buckets (None for none); differing buckets are a bug upstream."""
    merged: Histogram | None = None
    for each in histograms:
        if merged is None:
            merged = each
        elif merged.bounds != each.bounds:
            raise ValueError(f"histograms with different buckets: {merged.bounds} and {each.bounds}")
        else:
            merged = Histogram(
                each.bounds, tuple(a + b for a, b in zip(merged.counts, each.counts, strict=True))
            )
    return merged


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """One reading of a run's metrics (`actors.guard.metrics.read_metrics` reads it from Kafka and the
    sandbox workers' metrics endpoints)."""

    lag: Mapping[str, int] = field(default_factory=dict)  # consumer group -> records behind, all partitions
    acquire: Mapping[str, Histogram] = field(default_factory=dict)  # sandbox worker (its URL) -> histogram


# -- the engine --------------------------------------------------------------------------------------------

LabelKey = tuple[tuple[str, str], ...]
RECENT_EPISODES = 20_000  # episode ids remembered to drop a repeated trajectory (a redelivery comes soon)


def _key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


class AlertEngine:
    def __init__(self, run_id: str, settings: AlertSettings, origin: Origin) -> None:
        self.run_id = run_id
        self.settings = settings
        self.origin = origin
        self.now_us = 0  # the latest time seen (records' or the caller's): rules never go back in time
        self._active: set[tuple[Rule, LabelKey]] = set()
        self._logged: Counter[tuple[Rule, LabelKey]] = Counter()  # raised before a restart, not yet replayed
        self._own: OrderedDict[str, None] = OrderedDict()  # ids this engine raised (echoes on `alerts`)
        self._episodes: OrderedDict[str, None] = OrderedDict()
        total = settings.reward_recent + settings.reward_baseline
        self._rewards: deque[float] = deque(maxlen=total)
        self._ended: deque[str | None] = deque(
            maxlen=settings.failure_window
        )  # failure class, None: completed
        self._stale: deque[bool] = deque(maxlen=settings.stale_window)
        self._stale_lags: deque[int] = deque(maxlen=settings.stale_window)
        self._latest_policy: int | None = None
        self._idle_since_us: int | None = None  # the last publication, else the first trajectory
        self._since_publish = 0  # trajectories completed since the last publication
        self._deadletters: dict[str, tuple[int, int]] = {}  # reason -> (last seen us, count in the burst)
        self._lags: dict[str, deque[int]] = {}
        self._acquire: deque[tuple[int, Mapping[str, Histogram]]] = deque()

    # -- records --------------------------------------------------------------------------------------------

    def observe(self, value: object) -> list[Alert]:
        """The alerts raised by one decoded record of the run's topics (records of other runs and types
        are ignored; a repeated trajectory is counted once)."""
        if isinstance(value, Alert):
            self._restore(value)
            return []
        if isinstance(value, TrajectoryCompleted | TrajectoryFailed):
            if value.meta.run_id != self.run_id or not self._first_time(value.meta.episode_id):
                return []
            self._advance(value.meta.occurred_at_us)
            if isinstance(value, TrajectoryCompleted):
                return [*self._completed(value), *self._ended_episode(None), *self._idle()]
            return self._ended_episode(value.failure.value)
        if isinstance(value, DeadLetter):
            self._advance(value.meta.occurred_at_us)
            return self._dead_letter(value)
        if isinstance(value, PolicyPublished) and value.run_id == self.run_id:
            self._advance(value.meta.occurred_at_us)
            return self._published(value)
        if isinstance(value, CanaryGraded) and value.run_id == self.run_id:
            self._advance(value.meta.occurred_at_us)
            return self._canary(value)
        if isinstance(value, VersionChanged) and value.run_id == self.run_id:
            self._advance(value.meta.occurred_at_us)
            return self._version_changed(value)
        return []

    def observe_all(self, values: Iterable[object]) -> list[Alert]:
        return [alert for value in values for alert in self.observe(value)]

    def tick(self, now_us: int) -> list[Alert]:
        """The rules that fire or clear on silence, at `now_us`: call it every few seconds."""
        self._advance(now_us)
        return [*self._idle(), *self._bursts_over()]

    def _advance(self, at_us: int) -> None:
        self.now_us = max(self.now_us, at_us)

    def _first_time(self, episode_id: str) -> bool:
        if episode_id in self._episodes:
            return False
        self._episodes[episode_id] = None
        if len(self._episodes) > RECENT_EPISODES:
            self._episodes.popitem(last=False)
        return True

    # -- de-duplication -------------------------------------------------------------------------------------

    def _condition(
        self,
        rule: Rule,
        labels: Mapping[str, str],
        holds: bool,
        summary: str,
        value: float | None = None,
        threshold: float | None = None,
    ) -> list[Alert]:
        """One alert when (rule, labels) becomes true; none while it stays true; re-armed once false."""
        key = (rule, _key(labels))
        if not holds or not self.settings.on(rule):
            self._active.discard(key)
            return []
        if key in self._active:
            return []
        self._active.add(key)
        return self._raise(rule, labels, summary, value, threshold)

    def _raise(
        self,
        rule: Rule,
        labels: Mapping[str, str],
        summary: str,
        value: float | None,
        threshold: float | None,
    ) -> list[Alert]:
        key = (rule, _key(labels))
        if self._logged[key] > 0:  # the log has this raising already: the replay reached it again
            self._logged[key] -= 1
            return []
        alert_id = self.origin.ids.new_id()
        self._own[alert_id] = None
        if len(self._own) > RECENT_EPISODES:
            self._own.popitem(last=False)
        meta = RecordMeta(alert_id, self.now_us, self.origin.producer)
        finite = value if value is None or math.isfinite(value) else None  # Avro doubles allow inf; JSON not
        return [Alert(meta, self.run_id, alert_id, rule.value, SEVERITY[rule], summary, finite, threshold,
                      dict(labels))]  # fmt: skip

    def _restore(self, alert: Alert) -> None:
        if alert.run_id != self.run_id or alert.alert_id in self._own:
            return
        try:
            rule = Rule(alert.rule)
        except ValueError:
            return  # another writer's rule (an operator's note): nothing to replay
        if rule not in METRIC_RULES:
            self._logged[(rule, _key(alert.labels))] += 1

    # -- the record rules -----------------------------------------------------------------------------------

    def _completed(self, value: TrajectoryCompleted) -> list[Alert]:
        s = self.settings
        alerts = []
        self._rewards.append(value.reward)
        if len(self._rewards) == self._rewards.maxlen:
            rewards = list(self._rewards)
            baseline = statistics.fmean(rewards[: s.reward_baseline])
            recent = statistics.fmean(rewards[s.reward_baseline :])
            window = f"last {s.reward_recent} trajectories vs the {s.reward_baseline} before"
            drop = _exceeds(baseline - recent, baseline, s.reward_drop_abs, s.reward_drop_rel)
            alerts += self._condition(
                Rule.REWARD_COLLAPSE, {}, drop,
                f"mean reward fell to {recent:.3f} from {baseline:.3f} ({window})",
                baseline - recent, s.reward_drop_abs,
            )  # fmt: skip
            rise = _exceeds(recent - baseline, baseline, s.reward_rise_abs, s.reward_rise_rel)
            alerts += self._condition(
                Rule.REWARD_JUMP, {}, rise,
                f"mean reward jumped to {recent:.3f} from {baseline:.3f} ({window})",
                recent - baseline, s.reward_rise_abs,
            )  # fmt: skip
        self._since_publish += 1
        if self._idle_since_us is None:
            self._idle_since_us = value.meta.occurred_at_us
        if self._latest_policy is not None:
            lag = self._latest_policy - value.min_policy_version
            self._stale.append(lag > s.stale_versions)
            self._stale_lags.append(lag)
            alerts += self._staleness()
        return alerts

    def _staleness(self) -> list[Alert]:
        s = self.settings
        share = sum(self._stale) / len(self._stale) if self._stale else 0.0
        holds = len(self._stale) >= s.stale_window and share >= s.stale_share
        worst = max(self._stale_lags, default=0)
        return self._condition(
            Rule.LEARNER_STALE, {}, holds,
            f"{share:.0%} of the last {len(self._stale)} trajectories were sampled more than "
            f"{s.stale_versions} policy versions behind v{self._latest_policy} (up to {worst})",
            float(worst), float(s.stale_versions),
        )  # fmt: skip

    def _ended_episode(self, failure: str | None) -> list[Alert]:
        s = self.settings
        self._ended.append(None if failure in s.failure_ignored else failure)
        counts = Counter(c for c in self._ended if c is not None)
        ended = len(self._ended)
        classes = set(counts) | {
            dict(labels)["class"] for rule, labels in self._active if rule is Rule.FAILURE_RATE
        }
        alerts = []
        for name in sorted(classes):
            rate = counts[name] / ended
            holds = ended >= s.failure_min_episodes and rate > s.failure_rate
            alerts += self._condition(
                Rule.FAILURE_RATE, {"class": name}, holds,
                f"{counts[name]} of the last {ended} ended episodes failed with {name} ({rate:.0%})",
                rate, s.failure_rate,
            )  # fmt: skip
        return alerts

    def _published(self, value: PolicyPublished) -> list[Alert]:
        self._latest_policy = max(self._latest_policy or 0, value.version)
        self._idle_since_us = value.meta.occurred_at_us
        self._since_publish = 0
        return self._condition(Rule.LEARNER_IDLE, {}, False, "")

    def _idle(self) -> list[Alert]:
        s = self.settings
        if self._idle_since_us is None:
            return []
        quiet_s = (self.now_us - self._idle_since_us) / US
        holds = quiet_s >= s.idle_s and self._since_publish >= s.idle_min_trajectories
        last = "no policy published yet" if self._latest_policy is None else f"v{self._latest_policy} last"
        return self._condition(
            Rule.LEARNER_IDLE, {}, holds,
            f"no policy published for {quiet_s:.0f} s while {self._since_publish} trajectories "
            f"completed ({last})",
            quiet_s, s.idle_s,
        )  # fmt: skip

    def _dead_letter(self, value: DeadLetter) -> list[Alert]:
        reason = value.reason
        last_us, count = self._deadletters.get(reason, (0, 0))
        if count and self.now_us - last_us >= self.settings.deadletter_quiet_s * US:
            # The burst was over before this one (a replay sees no ticks): this one starts the next.
            count = 0
            self._condition(Rule.DEAD_LETTERS, {"reason": reason}, False, "")
        self._deadletters[reason] = (self.now_us, count + 1)
        return self._condition(
            Rule.DEAD_LETTERS, {"reason": reason}, True,
            f"dead letter from {value.topic}[{value.partition}]@{value.offset}: {reason} "
            f"({value.detail[:200]})",
            1.0, 0.0,
        )  # fmt: skip

    def _bursts_over(self) -> list[Alert]:
        quiet_us = self.settings.deadletter_quiet_s * US
        for reason, (last_us, _count) in list(self._deadletters.items()):
            if self.now_us - last_us >= quiet_us:
                del self._deadletters[reason]
                self._condition(Rule.DEAD_LETTERS, {"reason": reason}, False, "")
        return []

    def _canary(self, value: CanaryGraded) -> list[Alert]:
        expected = "pass" if value.expect_pass else "not pass"
        return self._condition(
            Rule.CANARY_FAILED, {"task": value.task_id, "case": value.case}, not value.ok,
            f"canary {value.case} of {value.task_id}@{value.task_version} should {expected}, graded "
            f"{value.verdict.value} ({value.passed}/{value.total}, reward {value.reward:g}) by "
            f"{value.grader.kind}/{value.grader.instance}", value.reward, None,
        )  # fmt: skip

    def _version_changed(self, value: VersionChanged) -> list[Alert]:
        labels = {"component": value.component, "seen": value.seen}
        key = (Rule.VERSION_CHANGED, _key(labels))
        if key in self._active or not self.settings.on(Rule.VERSION_CHANGED):
            return []  # a fact, not a condition: raised once per version seen, never cleared
        task = f" of task {value.task_id}" if value.task_id else ""
        return self._condition(
            Rule.VERSION_CHANGED, labels, True,
            f"{value.component}{task} graded by {value.seen}, pinned {value.pinned} (seen in {value.source})",
        )  # fmt: skip

    # -- the metric rules -----------------------------------------------------------------------------------

    def sample(self, metrics: RunMetrics, now_us: int) -> list[Alert]:
        """The alerts raised by one reading of the run's metrics at `now_us`."""
        self._advance(now_us)
        return [*self._lag(metrics.lag), *self._acquire_latency(metrics.acquire)]

    def _lag(self, lags: Mapping[str, int]) -> list[Alert]:
        s = self.settings
        alerts = []
        for group in sorted(set(lags) | set(self._lags)):
            history = self._lags.setdefault(group, deque(maxlen=s.lag_samples))
            if group not in lags:  # the group is gone (no committed offsets any more)
                del self._lags[group]
                alerts += self._condition(Rule.CONSUMER_LAG, {"group": group}, False, "")
                continue
            history.append(lags[group])
            now, samples = history[-1], list(history)
            key = (Rule.CONSUMER_LAG, _key({"group": group}))
            if key in self._active:
                holds = now > s.lag_floor and not (len(samples) == s.lag_samples and now < samples[0])
            else:
                rising = all(b > a for a, b in itertools.pairwise(samples))
                holds = len(samples) == s.lag_samples and rising and now > s.lag_floor
            alerts += self._condition(
                Rule.CONSUMER_LAG, {"group": group}, holds,
                f"consumer group {group} is {now} records behind and grew at each of the last {len(samples)} "
                f"samples (from {samples[0]})", float(now), float(s.lag_floor),
            )  # fmt: skip
        return alerts

    def _acquire_latency(self, acquire: Mapping[str, Histogram]) -> list[Alert]:
        s = self.settings
        if not acquire and not self._acquire:
            return []
        self._acquire.append((self.now_us, dict(acquire)))
        window_us = s.acquire_window_s * US
        # The oldest reading within the window is the baseline; older ones are dropped.
        while len(self._acquire) > 1 and self.now_us - self._acquire[1][0] >= window_us:
            self._acquire.popleft()
        _then, earlier = self._acquire[0]
        recent = (
            merge(h.since(earlier.get(worker)) for worker, h in acquire.items())
            if len(self._acquire) > 1
            else None
        )
        count = recent.count if recent is not None else 0
        p95 = recent.quantile(0.95) if recent is not None else math.nan
        holds = count >= s.acquire_min_count and p95 > s.acquire_p95_s
        shown = "over the last bucket" if math.isinf(p95) else f"{p95:g} s"
        return self._condition(
            Rule.ACQUIRE_LATENCY, {}, holds,
            f"sandbox acquire p95 {shown} over {count} acquires in the last {s.acquire_window_s:g} s "
            f"({len(acquire)} workers)", p95, s.acquire_p95_s,
        )  # fmt: skip


def _exceeds(change: float, baseline: float, absolute: float | None, relative: float | None) -> bool:
    """Whether `change` passes every threshold that is set (none set: never)."""
    if absolute is None and relative is None:
        return False
    return (absolute is None or change >= absolute) and (
        relative is None or change >= relative * abs(baseline)
    )


# -- shown to people and to webhooks -----------------------------------------------------------------------


def alert_json(alert: Alert) -> dict[str, Any]:
    """An alert as one JSON object (the webhook's body, `trialog alerts --json`, `run status --json`)."""
    return {
        "alert_id": alert.alert_id,
        "run": alert.run_id,
        "rule": alert.rule,
        "severity": alert.severity.value,
        "summary": alert.summary,
        "value": alert.value,
        "threshold": alert.threshold,
        "labels": dict(sorted(alert.labels.items())),
        "at_us": alert.meta.occurred_at_us,
        "producer": f"{alert.meta.producer.kind}/{alert.meta.producer.instance}",
    }


def alert_line(alert: Alert) -> str:
    """One line for a terminal or a log: time (UTC), severity, rule, labels, summary."""
    import datetime

    when = datetime.datetime.fromtimestamp(alert.meta.occurred_at_us / US, datetime.UTC)
    labels = ",".join(f"{k}={v}" for k, v in sorted(alert.labels.items()))
    return (
        f"{when:%Y-%m-%d %H:%M:%S} {alert.severity.value.upper():<8} {alert.rule}"
        f"{f' [{labels}]' if labels else ''}: {alert.summary}"
    )


def by_severity(alerts: Sequence[Alert]) -> dict[str, int]:
    """Counts of `alerts` by severity, every severity named (most severe first)."""
    counts = Counter(alert.severity for alert in alerts)
    return {severity.value: counts.get(severity, 0) for severity in reversed(Severity)}
