"""The alert engine's rules: each fires on the bad case, stays quiet on the healthy one, and is raised once
per episode of being true (re-armed once it clears); a restart does not raise again what the log holds."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from actors.guard.alerts import (
    AlertEngine,
    AlertSettings,
    Histogram,
    Rule,
    RunMetrics,
    alert_json,
    alert_line,
    by_severity,
)
from schemas.alerts import Alert, Severity
from schemas.blobs import BlobRef
from schemas.canaries import CanaryGraded
from schemas.codec import default_codec
from schemas.common import EventMeta, FailureClass, Producer, RecordMeta, Verdict
from schemas.deadletter import DeadLetter
from schemas.origin import FixedClock, Origin, SequentialIds
from schemas.publications import PolicyPublished
from schemas.run_control import VersionChanged
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

RUN = "run-a"
T0 = 1_700_000_000_000_000
S = 1_000_000
_episodes = itertools.count()


def _origin() -> Origin:
    return Origin(Producer("guard", "g0"), FixedClock(), SequentialIds("alert"))


def _engine(**settings: object) -> AlertEngine:
    return AlertEngine(RUN, AlertSettings(**settings), _origin())  # type: ignore[arg-type]


def _meta(at_us: int, episode: str | None = None, run: str = RUN) -> EventMeta:
    episode = episode or f"ep-{next(_episodes)}"
    return EventMeta(f"e-{episode}", at_us, Producer("streams", "s0"), run, episode, "task-1", "v1", 0, 1, 0,
                     None, "0" * 64)  # fmt: skip


def completed(reward: float = 0.5, at_us: int = T0, min_version: int = 0, **kw: str) -> TrajectoryCompleted:
    return TrajectoryCompleted(_meta(at_us, **kw), "g", "Fix it.", (), reward, Verdict.PARTIAL, 1, 2,
                               min_version, min_version)  # fmt: skip


def failed(failure: FailureClass, at_us: int = T0) -> TrajectoryFailed:
    return TrajectoryFailed(_meta(at_us), failure, "why", ())


def published(version: int, at_us: int) -> PolicyPublished:
    meta = RecordMeta(f"p{version}", at_us, Producer("learner", "l0"))
    return PolicyPublished(meta, RUN, version, version - 1, "file:///w", BlobRef("0" * 64, 1), 8)


def dead_letter(at_us: int, reason: str = "undecodable") -> DeadLetter:
    return DeadLetter(RecordMeta("d", at_us, Producer("streams", "s0")), f"{RUN}.policy.results", 3, 17, None,
                      b"x", reason, "bad magic")  # fmt: skip


def canary(ok: bool, at_us: int = T0, case: str = "reference") -> CanaryGraded:
    verdict = Verdict.PASS if ok else Verdict.FAIL
    meta, grader = RecordMeta("c", at_us, Producer("guard", "g0")), Producer("verifier", "v0")
    return CanaryGraded(meta, RUN, "can-1", 1, "task-1", "v1", case, True, ok, 1.0 if ok else -0.2, verdict,
                        1 if ok else 0, 1, None, grader, at_us - S, at_us, S)  # fmt: skip


def rules(alerts: list[Alert]) -> list[str]:
    return [alert.rule for alert in alerts]


# -- rewards -----------------------------------------------------------------------------------------------


def test_a_reward_collapse_fires_once_and_rearms_after_the_trailing_window_catches_up() -> None:
    engine = _engine(reward_recent=5, reward_baseline=10, reward_drop_abs=0.3)
    healthy = engine.observe_all(completed(0.8) for _ in range(40))
    assert healthy == []
    bad = [engine.observe(completed(0.0)) for _ in range(5)]
    assert [rules(alerts) for alerts in bad] == [[], ["reward_collapse"], [], [], []]  # 0.8 -> 0.48
    (alert,) = bad[1]
    assert alert.severity is Severity.CRITICAL and alert.value == pytest.approx(0.32)
    assert alert.threshold == 0.3 and alert.run_id == RUN and alert.alert_id == alert.meta.event_id
    # Staying collapsed: no second alert; once the baseline is all zeros too, it has cleared.
    assert engine.observe_all(completed(0.0) for _ in range(20)) == []
    assert (Rule.REWARD_COLLAPSE, ()) not in engine._active
    engine.observe_all(completed(0.8) for _ in range(15))  # a healthy stretch (a jump, by this window)
    assert rules(engine.observe_all(completed(0.0) for _ in range(5))) == ["reward_collapse"]


def test_a_reward_jump_fires_and_noise_within_the_thresholds_does_not() -> None:
    engine = _engine(reward_recent=5, reward_baseline=10, reward_rise_abs=0.4)
    noisy = engine.observe_all(completed(0.3 + 0.2 * (i % 2)) for i in range(60))
    assert noisy == []
    alerts = engine.observe_all(completed(1.0) for _ in range(5))
    assert rules(alerts) == ["reward_jump"] and alerts[0].severity is Severity.WARNING


def test_a_relative_threshold_must_also_hold_when_set() -> None:
    # From 0.5 to 0.3: 0.2 absolute (passes 0.1) but 40% of the baseline (fails 50%).
    engine = _engine(reward_recent=5, reward_baseline=5, reward_drop_abs=0.1, reward_drop_rel=0.5)
    engine.observe_all(completed(0.5) for _ in range(5))
    assert engine.observe_all(completed(0.3) for _ in range(5)) == []
    assert rules(engine.observe_all(completed(0.0) for _ in range(5))) == ["reward_collapse"]


def test_a_repeated_trajectory_and_other_runs_are_not_counted() -> None:
    engine = _engine(reward_recent=2, reward_baseline=2)
    engine.observe_all([completed(1.0), completed(1.0)])
    low = completed(-1.0)
    assert engine.observe_all([low, low, low, completed(-1.0, run="other")]) == []
    assert list(engine._rewards) == [1.0, 1.0, -1.0]


# -- failures ----------------------------------------------------------------------------------------------


def test_a_failure_class_above_its_rate_fires_with_its_class_and_rearms() -> None:
    engine = _engine(failure_window=10, failure_rate=0.2, failure_min_episodes=10)
    assert engine.observe_all(completed() for _ in range(10)) == []
    # 1 in 10 of each class: under the rate; never fires.
    quiet = engine.observe_all([failed(FailureClass.SANDBOX_CRASH), *(completed() for _ in range(9))])
    assert quiet == []
    alerts = engine.observe_all(failed(FailureClass.POLICY_TIMEOUT) for _ in range(3))
    assert rules(alerts) == ["failure_rate"] and alerts[0].labels == {"class": "policy_timeout"}
    assert alerts[0].value == pytest.approx(0.3) and alerts[0].threshold == 0.2
    assert engine.observe_all(failed(FailureClass.POLICY_TIMEOUT) for _ in range(3)) == []  # still true
    engine.observe_all(completed() for _ in range(10))  # cleared
    again = engine.observe_all(failed(FailureClass.POLICY_TIMEOUT) for _ in range(3))
    assert rules(again) == ["failure_rate"]


def test_failures_before_the_minimum_and_aborted_episodes_do_not_fire() -> None:
    engine = _engine(failure_window=10, failure_min_episodes=10)
    assert engine.observe_all(failed(FailureClass.SANDBOX_CRASH) for _ in range(5)) == []
    engine = _engine(failure_window=10, failure_min_episodes=1)
    assert engine.observe_all(failed(FailureClass.ABORTED) for _ in range(10)) == []


# -- dead letters, canaries, versions ----------------------------------------------------------------------


def test_dead_letters_fire_once_per_burst_and_again_after_a_quiet_period() -> None:
    engine = _engine(deadletter_quiet_s=60)
    first = engine.observe(dead_letter(T0))
    assert rules(first) == ["dead_letters"] and first[0].labels == {"reason": "undecodable"}
    assert "policy.results[3]@17" in first[0].summary
    assert engine.observe(dead_letter(T0 + 10 * S)) == []  # the same burst
    assert rules(engine.observe(dead_letter(T0 + 11 * S, reason="invalid_reply"))) == ["dead_letters"]
    assert engine.tick(T0 + 30 * S) == []
    assert engine.observe(dead_letter(T0 + 40 * S)) == []  # still the burst: 30 s since the last one
    engine.tick(T0 + 101 * S)  # 61 s of quiet: the burst is over
    assert rules(engine.observe(dead_letter(T0 + 102 * S))) == ["dead_letters"]
    # Without ticks (a replay), the quiet between two records ends a burst as well.
    assert rules(engine.observe(dead_letter(T0 + 200 * S))) == ["dead_letters"]


def test_a_wrong_canary_grade_is_critical_until_that_canary_grades_right_again() -> None:
    engine = _engine()
    assert engine.observe(canary(True)) == []
    alerts = engine.observe(canary(False))
    assert rules(alerts) == ["canary_failed"] and alerts[0].severity is Severity.CRITICAL
    assert alerts[0].labels == {"task": "task-1", "case": "reference"}
    assert engine.observe(canary(False)) == []
    assert rules(engine.observe(canary(False, case="hack:sys_exit"))) == ["canary_failed"]
    assert engine.observe(canary(True)) == []
    assert rules(engine.observe(canary(False))) == ["canary_failed"]


def test_a_version_change_is_raised_once_per_version_seen() -> None:
    engine = _engine()

    def changed(seen: str) -> VersionChanged:
        meta = RecordMeta("v", T0, Producer("guard", "g0"))
        return VersionChanged(meta, RUN, "verifier", "aaa", seen, None, "ep-9", Producer("verifier", "v1"))

    alerts = engine.observe(changed("bbb"))
    assert rules(alerts) == ["version_changed"] and alerts[0].severity is Severity.WARNING
    assert alerts[0].labels == {"component": "verifier", "seen": "bbb"}
    assert engine.observe(changed("bbb")) == []
    assert rules(engine.observe(changed("ccc"))) == ["version_changed"]


# -- the learner -------------------------------------------------------------------------------------------


def test_stale_trajectories_fire_and_fresh_ones_clear() -> None:
    engine = _engine(stale_versions=2, stale_window=4, stale_share=0.5)
    engine.observe(published(10, T0))
    assert engine.observe_all(completed(min_version=9) for _ in range(8)) == []
    alerts = engine.observe_all(completed(min_version=5) for _ in range(2))
    assert rules(alerts) == ["learner_stale"] and alerts[0].value == 5 and alerts[0].threshold == 2
    assert engine.observe_all(completed(min_version=5) for _ in range(2)) == []
    engine.observe_all(completed(min_version=10) for _ in range(4))
    assert rules(engine.observe_all(completed(min_version=1) for _ in range(2))) == ["learner_stale"]


def test_a_learner_idle_while_trajectories_arrive_fires_and_a_publication_clears() -> None:
    engine = _engine(idle_s=600, idle_min_trajectories=3)
    engine.observe(published(1, T0))
    assert engine.tick(T0 + 3600 * S) == []  # silent, but nothing arrives either: no alert
    engine = _engine(idle_s=600, idle_min_trajectories=3)
    engine.observe(published(1, T0))
    assert engine.observe_all(completed(at_us=T0 + i * 100 * S) for i in range(1, 4)) == []
    alerts = engine.tick(T0 + 601 * S)
    assert rules(alerts) == ["learner_idle"] and alerts[0].value == pytest.approx(601)
    assert engine.tick(T0 + 700 * S) == [] and engine.observe(completed(at_us=T0 + 800 * S)) == []
    engine.observe(published(2, T0 + 900 * S))
    engine.observe_all(completed(at_us=T0 + (900 + i) * S) for i in range(1, 4))
    assert engine.tick(T0 + 1400 * S) == []
    assert rules(engine.tick(T0 + 1501 * S)) == ["learner_idle"]


# -- metrics -----------------------------------------------------------------------------------------------


def test_consumer_lag_fires_only_when_above_the_floor_and_growing_and_clears_when_it_shrinks() -> None:
    engine = _engine(lag_floor=100, lag_samples=3)
    group = f"{RUN}.trialog-verifier"

    def at(i: int, lag: int) -> list[Alert]:
        return engine.sample(RunMetrics(lag={group: lag, f"{RUN}.trialog-streams": 5}), T0 + i * 10 * S)

    assert at(0, 5000) == [] and at(1, 5000) == [] and at(2, 5000) == []  # high but steady
    assert at(3, 10) == [] and at(4, 20) == [] and at(5, 30) == []  # growing, under the floor
    assert rules(at(6, 200)) == ["consumer_lag"]  # [20, 30, 200]: rising, and above the floor now
    engine = _engine(lag_floor=100, lag_samples=3)
    for i, lag in enumerate((150, 300)):
        assert engine.sample(RunMetrics(lag={group: lag}), T0 + i * S) == []
    fired = engine.sample(RunMetrics(lag={group: 600}), T0 + 2 * S)
    assert rules(fired) == ["consumer_lag"] and fired[0].labels == {"group": group}
    assert fired[0].value == 600 and fired[0].threshold == 100
    assert engine.sample(RunMetrics(lag={group: 650}), T0 + 3 * S) == []  # still growing: no repeat
    assert engine.sample(RunMetrics(lag={group: 620}), T0 + 4 * S) == []  # not below 600, 3 samples ago
    engine.sample(RunMetrics(lag={group: 400}), T0 + 5 * S)  # below 650 three samples ago: cleared
    assert (Rule.CONSUMER_LAG, (("group", group),)) not in engine._active
    for i, lag in enumerate((500, 700), start=6):
        engine.sample(RunMetrics(lag={group: lag}), T0 + i * S)
    assert (Rule.CONSUMER_LAG, (("group", group),)) in engine._active


BOUNDS = (0.1, 1.0, 5.0, 10.0, math.inf)


def _hist(*per_bucket: int) -> Histogram:
    return Histogram(BOUNDS, tuple(itertools.accumulate(per_bucket)))


def test_acquire_latency_p95_over_the_window_fires_and_clears() -> None:
    engine = _engine(acquire_window_s=60, acquire_p95_s=5.0, acquire_min_count=10)
    base = {"http://w1/metrics": _hist(100, 0, 0, 0, 0), "http://w2/metrics": _hist(50, 0, 0, 0, 0)}
    assert engine.sample(RunMetrics(acquire=base), T0) == []
    # Slow acquires in the window: 20 fast, 30 at 5-10 s on worker 2 -> p95 in the 10 s bucket.
    slow = {"http://w1/metrics": _hist(120, 0, 0, 0, 0), "http://w2/metrics": _hist(50, 0, 0, 30, 0)}
    alerts = engine.sample(RunMetrics(acquire=slow), T0 + 30 * S)
    assert rules(alerts) == ["acquire_latency"] and alerts[0].value == 10.0 and alerts[0].threshold == 5.0
    assert engine.sample(RunMetrics(acquire=slow), T0 + 50 * S) == []  # still in the window
    # A minute later only fast acquires are new: cleared, then a new slow stretch fires again.
    fast = {"http://w1/metrics": _hist(300, 0, 0, 0, 0), "http://w2/metrics": _hist(50, 0, 0, 30, 0)}
    assert engine.sample(RunMetrics(acquire=fast), T0 + 100 * S) == []
    assert engine.sample(RunMetrics(acquire=fast), T0 + 170 * S) == []
    assert (Rule.ACQUIRE_LATENCY, ()) not in engine._active
    slower = {"http://w1/metrics": _hist(300, 0, 0, 0, 0), "http://w2/metrics": _hist(50, 0, 0, 30, 40)}
    again = engine.sample(RunMetrics(acquire=slower), T0 + 200 * S)
    assert rules(again) == ["acquire_latency"] and again[0].value is None  # past the last bucket: not finite
    assert "over the last bucket" in again[0].summary


def test_acquire_latency_needs_enough_acquires_and_survives_a_worker_restart() -> None:
    engine = _engine(acquire_window_s=60, acquire_p95_s=5.0, acquire_min_count=10)
    engine.sample(RunMetrics(acquire={"w": _hist(1000, 0, 0, 0, 0)}), T0)
    assert engine.sample(RunMetrics(acquire={"w": _hist(1000, 0, 0, 5, 0)}), T0 + S) == []  # 5 < 10
    # The worker restarted: its counts started over (all of them are new, all fast).
    assert engine.sample(RunMetrics(acquire={"w": _hist(12, 0, 0, 0, 0)}), T0 + 2 * S) == []


def test_a_histogram_quantile_is_its_buckets_upper_bound() -> None:
    assert _hist(95, 5, 0, 0, 0).quantile(0.95) == 0.1
    assert _hist(94, 6, 0, 0, 0).quantile(0.95) == 1.0
    assert math.isnan(_hist(0, 0, 0, 0, 0).quantile(0.95))


# -- disabled rules, restart, presentation -----------------------------------------------------------------


def test_a_disabled_rule_never_fires() -> None:
    engine = _engine(disabled=frozenset({Rule.CANARY_FAILED}))
    assert engine.observe(canary(False)) == []


def test_a_restart_does_not_raise_again_what_the_log_holds_but_raises_what_it_lacks() -> None:
    history = [canary(False), canary(True), canary(False)]
    first = _engine()
    raised = first.observe_all(history)
    assert rules(raised) == ["canary_failed", "canary_failed"]
    # The guard restarts having written only the first alert: the replay raises only the second.
    second = _engine()
    assert second.observe(raised[0]) == []
    again = second.observe_all(history)
    assert rules(again) == ["canary_failed"]
    # Its own alerts echoed back on the topic are not counted as raised before.
    assert second.observe(again[0]) == []
    assert second.observe(canary(True)) == [] and rules(second.observe(canary(False))) == ["canary_failed"]


def test_alerts_encode_and_read_as_json_and_lines() -> None:
    (alert,) = _engine().observe(canary(False))
    codec = default_codec()
    assert codec.decode(codec.encode(alert)) == alert
    data = alert_json(alert)
    assert data["rule"] == "canary_failed" and data["severity"] == "critical" and data["run"] == RUN
    assert data["labels"] == {"case": "reference", "task": "task-1"} and data["at_us"] == T0
    assert "CRITICAL canary_failed [case=reference,task=task-1]: canary reference" in alert_line(alert)
    assert by_severity([alert, alert]) == {"critical": 2, "warning": 0, "info": 0}


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="lag_samples"):
        AlertSettings(lag_samples=1)
    with pytest.raises(ValueError, match="failure_rate"):
        AlertSettings(failure_rate=0)
    assert dataclasses.replace(AlertSettings(), idle_s=5).idle_s == 5
