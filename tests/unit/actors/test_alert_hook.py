"""The engine as the guard drives it: ticks wait until the replay is live, side sinks see every alert, the
guard's own rules are off, metric readings come from the sampler's thread."""

from __future__ import annotations

import threading

from actors.guard.alerts import AlertEngine, AlertSettings, Rule, RunMetrics
from actors.guard.hook import EngineHook, MetricsSampler, _without_guard_rules, extra_topics
from schemas.alerts import Alert
from tests.unit.actors.test_alerts import RUN, T0, S, _origin, canary, completed, dead_letter, published


class Collect:
    def __init__(self) -> None:
        self.alerts: list[Alert] = []

    def deliver(self, alert: Alert) -> None:
        self.alerts.append(alert)

    def close(self) -> None:
        pass


def test_ticks_wait_for_a_recent_record_and_side_sinks_see_every_alert() -> None:
    engine = AlertEngine(RUN, AlertSettings(idle_s=600, idle_min_trajectories=2), _origin())
    side = Collect()
    hook = EngineHook(engine, [side])
    now = T0 + 10 * 3600 * S  # the guard restarted hours after these records
    hook.observe("policy.versions", published(1, T0), now)
    hook.observe("trajectories.completed", completed(at_us=T0 + S), now)
    hook.observe("trajectories.completed", completed(at_us=T0 + 2 * S), now)
    assert hook.tick(now) == []  # replaying: "idle for 10 h" would be the replay's doing
    hook.observe("policy.versions", published(2, now - 5 * S), now)  # the replay reached today
    hook.observe("trajectories.completed", completed(at_us=now - 4 * S), now)
    hook.observe("trajectories.completed", completed(at_us=now - 3 * S), now)
    assert hook.live and hook.tick(now) == []
    fired = hook.tick(now + 601 * S)
    assert [a.rule for a in fired] == ["learner_idle"] and side.alerts == fired
    assert hook.observe("deadletter", dead_letter(now), now)[0].rule == "dead_letters"
    assert hook.observe("episode.events", dead_letter(now), now) == []  # not one of the engine's topics
    assert len(side.alerts) == 2


def test_the_guards_own_rules_are_off_in_the_engine_it_hosts() -> None:
    settings = _without_guard_rules(AlertSettings(disabled=frozenset({Rule.REWARD_JUMP})))
    assert settings.disabled == {Rule.REWARD_JUMP, Rule.CANARY_FAILED, Rule.VERSION_CHANGED}
    assert AlertEngine(RUN, settings, _origin()).observe(canary(False)) == []
    assert {t.name for t in extra_topics()} == {"trajectories.failed", "deadletter", "policy.versions"}


def test_metric_readings_come_from_the_samplers_thread_once_each() -> None:
    read = threading.Event()
    group = f"{RUN}.trialog-verifier"
    lags = iter([2000, 3000, 4000])

    def reading() -> RunMetrics:
        read.set()
        return RunMetrics(lag={group: next(lags, 4000)})

    sampler = MetricsSampler(reading, every_s=0.01)
    engine = AlertEngine(RUN, AlertSettings(lag_samples=3, lag_floor=100), _origin())
    hook = EngineHook(engine, [], sampler)
    hook.mark_live()
    assert read.wait(5)
    fired: list[Alert] = []
    for i in range(200):
        fired += hook.tick(T0 + i * S)
        if fired:
            break
        threading.Event().wait(0.01)
    hook.close()
    assert [a.rule for a in fired] == ["consumer_lag"] and fired[0].labels == {"group": group}
