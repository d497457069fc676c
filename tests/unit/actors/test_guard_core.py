"""The guard's decisions (`actors.guard.core`): version changes, canary rounds, clearance, a wrong canary's
alert, pause and quarantine, the share cap, and a restarted guard that repeats nothing."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from actors.guard import control
from actors.guard.core import MAX_OUTSTANDING, CanaryPlan, Case, Guard, Write
from schemas.alerts import Alert, Severity
from schemas.blobs import BlobRef
from schemas.canaries import CanaryGraded
from schemas.common import EventMeta, Producer, RecordMeta, Verdict
from schemas.events import RewardAssigned
from schemas.origin import FixedClock, Origin, SequentialIds
from schemas.publications import TaskPublished
from schemas.run_control import (
    GraderCleared,
    GuardSettings,
    PinnedTask,
    RunPaused,
    RunPinned,
    RunResumed,
    TrajectoriesQuarantined,
    VersionChanged,
)
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import GradeVersions

pytestmark = pytest.mark.unit

RUN = "r1"
MINUTE_US = 60_000_000
T0 = 1_700_000_000_000_000
TASK_VERSION = hashlib.sha256(b"t1").hexdigest()
PINNED = GradeVersions("v" * 64, "sha256:" + "i" * 64, "t" * 64, "r" * 64)
BROKEN = dataclasses.replace(PINNED, verifier="b" * 64)
CASES = {"t1": (Case("reference", True), Case("untouched", False), Case("hack:exit", False))}
META = RecordMeta("m", T0, Producer("test", "test"))


def _pin(rate: float = 3.0, pause: bool = True, share: float = 0.05) -> RunPinned:
    settings = GuardSettings(rate, share, pause, hold_for_clearance=True)
    tasks = (PinnedTask("t1", TASK_VERSION, PINNED.tests),)
    return RunPinned(META, RUN, PINNED.verifier, PINNED.image, PINNED.reward_config, tasks, settings)


def _task() -> TaskPublished:
    bundle = BlobRef("0" * 64, 1, "application/x-tar")
    return TaskPublished(META, "t1", TASK_VERSION, "fix it", "img", 60.0, "pytest", None, (), bundle)


def _guard(pin: RunPinned | None = None) -> Guard:
    origin = Origin(Producer("guard", "g0"), FixedClock(T0, 1), SequentialIds("g"))
    guard = Guard(RUN, origin, CASES)
    guard.observe("tasks", _task())
    guard.observe("run.control", pin or _pin())
    return guard


def _grade(
    episode: str, reward: float, verdict: Verdict, versions: GradeVersions | None, at_us: int,
    instance: str = "verifier-0", duration_us: int = 1_000_000,
) -> RewardAssigned:  # fmt: skip
    meta = EventMeta(
        f"e-{episode}-{at_us}", at_us, Producer("verifier", instance), RUN, episode, "t1", TASK_VERSION, 0, 1,
        0, "snap", "0" * 64,
    )  # fmt: skip
    return RewardAssigned(
        meta, reward, verdict, 1, 1, (), (), "trialog-verify/1", versions=versions, duration_us=duration_us
    )


def _trajectory(episode: str, versions: GradeVersions, at_us: int) -> TrajectoryCompleted:
    meta = _grade(episode, 1.0, Verdict.PASS, versions, at_us).meta
    return TrajectoryCompleted(meta, "g", "fix", (), 1.0, Verdict.PASS, 1, 1, 0, 0, versions, at_us)


def _records(writes: list[Write], kind: type) -> list:  # type: ignore[type-arg]
    return [w.record for w in writes if isinstance(w.record, kind)]


def _answer(
    guard: Guard, plan: CanaryPlan, reward: float, versions: GradeVersions, at_us: int
) -> list[Write]:
    verdict = Verdict.PASS if reward >= 1.0 else Verdict.FAIL
    return guard.observe("canary.results", _grade(plan.canary_id, reward, verdict, versions, at_us))


def test_rounds_alternate_must_pass_and_must_not_pass_cases_at_the_pinned_rate() -> None:
    guard = _guard()
    plans = []
    for minute in range(6):
        for third in range(3):  # three a minute: one every 20 s
            now = T0 + minute * MINUTE_US + third * 20_000_000
            writes, planned = guard.tick(now)
            assert writes == []
            for plan in planned:
                _answer(guard, plan, 1.0 if plan.case.expect_pass else -0.2, PINNED, now + 1)
            plans += planned
    assert len(plans) == 18
    assert [p.case.expect_pass for p in plans[:4]] == [True, False, True, False]
    assert {p.case.name for p in plans if not p.case.expect_pass} == {"untouched", "hack:exit"}
    assert [p.round for p in plans] == list(range(18))
    request = plans[0].request(RUN, "snap-1", guard.origin)
    assert request.meta.episode_id == plans[0].canary_id and request.meta.snapshot_id == "snap-1"


def test_no_canary_without_a_pin_or_at_rate_zero() -> None:
    origin = Origin(Producer("guard", "g0"), FixedClock(T0, 1), SequentialIds("g"))
    unpinned = Guard(RUN, origin, CASES)
    unpinned.observe("tasks", _task())
    assert unpinned.tick(T0) == ([], [])
    assert _guard(_pin(rate=0.0)).tick(T0) == ([], [])


def test_a_right_pass_and_a_right_reject_vouch_for_the_grader_up_to_the_older_request() -> None:
    guard = _guard()
    _, [first] = guard.tick(T0)
    writes = _answer(guard, first, 1.0, PINNED, T0 + 5)
    [graded] = _records(writes, CanaryGraded)
    assert graded.ok and graded.case == "reference" and _records(writes, GraderCleared) == []
    _, [second] = guard.tick(T0 + 20_000_000)
    writes = _answer(guard, second, -0.2, PINNED, T0 + 20_000_005)
    [cleared] = _records(writes, GraderCleared)
    assert (cleared.verifier, cleared.image, cleared.up_to_us) == (PINNED.verifier, PINNED.image, T0)


def test_a_version_other_than_the_pin_is_recorded_once_with_an_alert() -> None:
    guard = _guard()
    writes = guard.observe("verify.results", _grade("ep1", 1.0, Verdict.PASS, BROKEN, T0))
    [change] = _records(writes, VersionChanged)
    assert (change.component, change.pinned, change.seen) == ("verifier", PINNED.verifier, BROKEN.verifier)
    [alert] = _records(writes, Alert)
    assert alert.rule == "version_changed" and alert.severity is Severity.WARNING
    assert guard.observe("verify.results", _grade("ep2", 1.0, Verdict.PASS, BROKEN, T0 + 1)) == []
    assert guard.observe("verify.results", _grade("ep3", 1.0, Verdict.PASS, PINNED, T0 + 2)) == []
    unnamed = guard.observe("verify.results", _grade("ep4", 1.0, Verdict.PASS, None, T0 + 3))
    assert [c.seen for c in _records(unnamed, VersionChanged)] == ["(names no versions)"]


def test_a_wrong_canary_alerts_pauses_and_quarantines_what_the_faulty_verifier_graded() -> None:
    guard = _guard()
    for episode in ("ep1", "ep2"):
        guard.observe("trajectories.completed", _trajectory(episode, BROKEN, T0))
    guard.observe("trajectories.completed", _trajectory("ep-good", PINNED, T0))
    _, [first] = guard.tick(T0)
    _answer(guard, first, 1.0, BROKEN, T0 + 1)  # right: a pass-all grader passes the reference
    _, [second] = guard.tick(T0 + 20_000_000)
    writes = _answer(guard, second, 1.0, BROKEN, T0 + 20_000_001)  # wrong: the untouched repo passed
    [graded] = _records(writes, CanaryGraded)
    assert not graded.ok and not graded.expect_pass
    [alert] = _records(writes, Alert)
    assert alert.rule == "canary_failed" and alert.severity is Severity.CRITICAL
    [paused] = _records(writes, RunPaused)
    assert paused.alert_id == alert.alert_id
    [rule] = _records(writes, TrajectoriesQuarantined)
    assert (rule.component, rule.value, rule.since_us) == ("verifier", BROKEN.verifier, 0)
    assert rule.episode_ids == ("ep1", "ep2")
    assert _records(writes, GraderCleared) == []  # a faulty grader is never vouched for
    assert guard.state.control.is_paused
    # Another wrong canary by the same grader: on record, but no second alert, pause or rule.
    _, [third] = guard.tick(T0 + 40_000_000)
    _answer(guard, third, 1.0, BROKEN, T0 + 40_000_001)
    _, [fourth] = guard.tick(T0 + 60_000_000)
    again = _answer(guard, fourth, 1.0, BROKEN, T0 + 60_000_001)
    assert [type(w.record) for w in again] == [CanaryGraded]


def test_the_pinned_grader_gone_wrong_is_quarantined_since_it_was_last_vouched_for() -> None:
    guard = _guard()
    _, [first] = guard.tick(T0)
    _answer(guard, first, 1.0, PINNED, T0 + 1)
    _, [second] = guard.tick(T0 + 20_000_000)
    [cleared] = _records(_answer(guard, second, -0.2, PINNED, T0 + 20_000_001), GraderCleared)
    guard.observe("run.control", cleared)  # read back
    _, [third] = guard.tick(T0 + 40_000_000)
    writes = _answer(guard, third, -0.2, PINNED, T0 + 40_000_001)  # the reference failed
    [rule] = _records(writes, TrajectoriesQuarantined)
    assert (rule.component, rule.value, rule.since_us) == ("verifier", PINNED.verifier, cleared.up_to_us)


def test_without_pause_on_failure_the_run_is_not_paused_but_still_quarantined() -> None:
    guard = _guard(_pin(pause=False))
    _, [first] = guard.tick(T0)
    writes = _answer(guard, first, -0.2, BROKEN, T0 + 1)
    assert not _records(writes, RunPaused) and _records(writes, TrajectoriesQuarantined)


def test_an_ungradable_canary_is_an_outage_not_a_wrong_grade() -> None:
    guard = _guard()
    _, [first] = guard.tick(T0)
    writes = guard.observe("canary.results", _grade(first.canary_id, 0.0, Verdict.ERROR, PINNED, T0 + 1))
    [graded] = _records(writes, CanaryGraded)
    assert not graded.ok
    assert [a.rule for a in _records(writes, Alert)] == ["canary_error"]
    assert not _records(writes, RunPaused) and not _records(writes, TrajectoriesQuarantined)


def test_canaries_wait_while_over_their_share_of_grading_or_too_many_are_unanswered() -> None:
    guard = _guard(_pin(rate=60.0, share=0.05))
    plans = [plan for second in range(MAX_OUTSTANDING + 2) for plan in guard.tick(T0 + second * 1_000_000)[1]]
    assert len(plans) == MAX_OUTSTANDING  # none answered: no more
    # One verifier, busy with canaries 60 s out of the 10-minute window: 10 %, over a 5 % share.
    for plan in plans:
        guard.observe("canary.results", _grade(plan.canary_id, 1.0, Verdict.PASS, PINNED, T0 + 5_000_000,
                                               duration_us=15_000_000))  # fmt: skip
    assert guard.tick(T0 + 10_000_000)[1] == []
    assert guard.state.canary_share(T0 + 10_000_000) == pytest.approx(0.1)


def test_a_restarted_guard_reading_its_log_back_repeats_nothing() -> None:
    guard = _guard()
    log: list[tuple[str, object]] = [("tasks", _task()), ("run.control", _pin())]

    def carry(writes: list[Write]) -> None:
        log.extend((w.topic, w.record) for w in writes)

    inputs: list[tuple[str, object]] = [("trajectories.completed", _trajectory("ep1", BROKEN, T0))]
    for topic, value in inputs:
        carry(guard.observe(topic, value))
    for i in range(2):
        _, [plan] = guard.tick(T0 + i * 20_000_000)
        request = plan.request(RUN, "snap", guard.origin)
        log.append(("canary.requests", request))
        answer = _grade(plan.canary_id, 1.0, Verdict.PASS, BROKEN, T0 + i * 20_000_000 + 1)
        inputs.append(("canary.results", answer))
        carry(guard.observe("canary.results", answer))
    inputs.append(("verify.results", _grade("ep1", 1.0, Verdict.PASS, BROKEN, T0)))
    carry(guard.observe("verify.results", inputs[-1][1]))
    assert any(isinstance(v, TrajectoriesQuarantined) for _, v in log)
    # A new process: its own records first, then everything again.
    restarted = Guard(RUN, guard.origin, CASES)
    own = ("tasks", "run.control", "canary.grades", "canary.requests")
    for topic, value in [entry for entry in log if entry[0] in own]:
        assert restarted.observe(topic, value) == []
    for topic, value in inputs:
        assert restarted.observe(topic, value) == [], (topic, value)
    assert restarted.state.rounds == 2 and restarted.state.control.is_paused


def test_the_control_fold_obeys_pause_resume_and_rules() -> None:
    state = control.fold(RUN, [_pin(), RunPaused(META, RUN, "canary"), RunResumed(META, RUN, "fixed")])
    assert not state.is_paused and state.pinned is not None
    assert control.fold(RUN, [RunPaused(META, "other", "x")]).paused is None
