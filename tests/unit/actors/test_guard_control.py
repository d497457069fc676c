"""The run's control state, the fold of run.control that the scheduler, the learner, `run status`, `trialog
quarantine` and the audit obey: pin, pause, quarantine rules, grader clearances, version changes."""

from __future__ import annotations

import dataclasses

import pytest

from actors.guard.control import VERSION, ControlState, apply, fold, grade_version, matches
from learner import testing
from schemas.codec import default_codec
from schemas.run_control import ANY
from schemas.versions import Component, GradeVersions
from tests.unit.actors.guard_records import (
    GRADED_AT,
    IMAGE,
    REWARD,
    RUN,
    TESTS,
    VERIFIER,
    VERSIONS,
    changed,
    cleared,
    graded,
    paused,
    pinned,
    resumed,
    rule,
)

TRAJECTORY = graded(testing.trajectory(episode_id="ep-1"))


def test_the_first_pin_is_the_runs_and_a_later_one_is_ignored() -> None:
    first, second = pinned(), pinned(hold=True)
    state = fold(RUN, [first, second])
    assert state.pinned == first and not state.holds_for_clearance


def test_paused_after_a_pause_until_a_resume_after_it() -> None:
    pause = paused("canary c1 graded 1.0 instead of 0.0")
    state = fold(RUN, [pause])
    assert state.is_paused and state.paused == pause
    second = paused("another canary")
    assert apply(state, second).paused == pause  # the pause in force keeps its first reason
    resume = resumed()
    state = apply(state, resume)
    assert not state.is_paused and state.resumed == resume
    assert fold(RUN, [resume, paused()]).is_paused  # a resume before the pause does not undo it


def test_another_runs_records_and_other_types_change_nothing() -> None:
    records = [pinned(run="other"), paused(run="other"), rule(ANY, run="other"), cleared(1, run="other"), 42]
    assert fold(RUN, records) == ControlState(RUN)


@pytest.mark.parametrize(
    ("component", "value"),
    [
        (Component.VERIFIER.value, VERIFIER),
        (Component.IMAGE.value, IMAGE),
        (Component.TESTS.value, TESTS),
        (Component.REWARD_CONFIG.value, REWARD),
        (Component.TASK.value, "v1"),
        (VERSION, IMAGE),
        (VERSION, "v1"),
    ],
)
def test_a_rule_on_a_version_quarantines_what_that_version_graded(component: str, value: str) -> None:
    state = fold(RUN, [rule(component, value)])
    assert state.quarantine_rule(TRAJECTORY) is not None
    other = graded(TRAJECTORY, GradeVersions("ff" * 32, "sha256:" + "ff" * 32, "ff" * 32, "ff" * 32))
    other = dataclasses.replace(other, meta=dataclasses.replace(other.meta, task_version="v2"))
    assert state.quarantine_rule(other) is None


def test_a_rule_matches_only_its_component() -> None:
    assert not matches(rule(Component.VERIFIER.value, IMAGE), TRAJECTORY)
    assert not matches(rule("no-such-component", IMAGE), TRAJECTORY)


def test_a_rule_names_episodes_it_quarantines_whatever_their_versions_or_time() -> None:
    named = rule(Component.IMAGE.value, "sha256:" + "00" * 32, since_us=GRADED_AT + 1, episodes=("ep-1",))
    assert matches(named, TRAJECTORY)
    assert not matches(named, graded(testing.trajectory(episode_id="ep-2")))


def test_a_time_window_is_since_inclusive_until_exclusive() -> None:
    window = rule(ANY, since_us=GRADED_AT, until_us=GRADED_AT + 10)
    assert matches(window, graded(TRAJECTORY, at_us=GRADED_AT))
    assert matches(window, graded(TRAJECTORY, at_us=GRADED_AT + 9))
    assert not matches(window, graded(TRAJECTORY, at_us=GRADED_AT + 10))
    assert not matches(window, graded(TRAJECTORY, at_us=GRADED_AT - 1))
    open_ended = rule(Component.IMAGE.value, IMAGE, since_us=GRADED_AT)
    assert matches(open_ended, graded(TRAJECTORY, at_us=GRADED_AT + 10**12))
    assert not matches(open_ended, graded(TRAJECTORY, at_us=GRADED_AT - 1))


def test_a_rule_of_another_run_never_matches() -> None:
    assert not matches(rule(ANY, run="other"), TRAJECTORY)


def test_a_trajectory_that_names_no_versions_matches_only_by_task_or_id() -> None:
    unnamed = graded(TRAJECTORY, versions=None, at_us=0)
    assert grade_version(None, "v1", Component.IMAGE.value) == ()
    assert grade_version(None, "v1", VERSION) == ("v1",)
    assert not matches(rule(Component.IMAGE.value, IMAGE), unnamed)
    assert matches(rule(Component.TASK.value, "v1"), unnamed)
    assert matches(rule(ANY), unnamed)


def test_rules_only_add_and_a_redelivered_rule_counts_once() -> None:
    first = rule(Component.IMAGE.value, IMAGE, rule_id="r1")
    second = rule(Component.VERIFIER.value, VERIFIER, rule_id="r2")
    state = fold(RUN, [first, second, first])
    assert [r.rule_id for r in state.rules] == ["r1", "r2"]
    assert state.quarantine_rule(TRAJECTORY) == first  # the first that matches
    assert fold(RUN, [first, resumed(), cleared(GRADED_AT)]).rules == (first,)  # nothing un-quarantines


def test_without_the_hold_every_grade_is_vouched_for() -> None:
    assert ControlState(RUN).vouched(TRAJECTORY)
    assert fold(RUN, [pinned(hold=False)]).vouched(graded(TRAJECTORY, versions=None))


def test_with_the_hold_a_grade_is_vouched_for_once_its_grader_is_cleared_up_to_its_time() -> None:
    state = fold(RUN, [pinned(hold=True)])
    assert not state.vouched(TRAJECTORY)
    state = apply(state, cleared(GRADED_AT - 1))
    assert not state.vouched(TRAJECTORY)
    state = apply(state, cleared(GRADED_AT))
    assert state.vouched(TRAJECTORY)
    assert apply(state, cleared(GRADED_AT - 5)).cleared[(VERIFIER, IMAGE)] == GRADED_AT  # never goes back
    other_image = graded(TRAJECTORY, dataclasses.replace(VERSIONS, image="sha256:" + "99" * 32))
    assert not state.vouched(other_image)  # cleared per (verifier, image)


def test_with_the_hold_a_grade_without_versions_or_time_is_never_vouched_for() -> None:
    state = fold(RUN, [pinned(hold=True), cleared(GRADED_AT * 2)])
    assert not state.vouched(graded(TRAJECTORY, versions=None, at_us=GRADED_AT))
    assert not state.vouched(graded(TRAJECTORY, at_us=0))  # when it was graded is unknown


def test_version_changes_are_kept_in_order_and_a_redelivered_one_once() -> None:
    first, second = changed("image"), changed("verifier", "77" * 32)
    state = fold(RUN, [first, second, first])
    assert state.changes == (first, second)


def test_the_state_is_a_value_a_reader_can_compare_and_hash() -> None:
    records = [pinned(hold=True), cleared(GRADED_AT), rule(ANY), paused()]
    assert fold(RUN, records) == fold(RUN, records)
    assert isinstance(hash(fold(RUN, records)), int)


def test_to_json_says_what_a_status_shows() -> None:
    state = fold(RUN, [pinned(), paused("why"), rule(Component.IMAGE.value, IMAGE), changed()])
    shown = state.to_json()
    assert shown["pinned"] is True and shown["paused"] == "why"
    assert shown["quarantine_rules"] == [
        {"rule": "rule-1", "component": "image", "value": IMAGE, "reason": "a faulty grader"}
    ]
    assert len(shown["version_changes"]) == 1  # type: ignore[arg-type]


def test_every_control_record_round_trips_through_the_codec() -> None:
    codec = default_codec()
    records = [pinned(hold=True), paused(), resumed(), rule(ANY, until_us=5, episodes=("e",)), cleared(3),
               changed()]  # fmt: skip
    assert [codec.decode(codec.encode(r)) for r in records] == records
