"""The run's control state: a pure fold of `run.control` (`apply(state, record) -> state`).

Every reader of the control log folds the same records in the same order (the topic has one partition):
the scheduler (is the run paused?), the learner (is this trajectory quarantined, is its grader vouched
for?), `run status`, `trialog quarantine` and the audit. So a decision is written once, by whoever took it
(the guard, an operator), and obeyed by all of them, live or in replay.

Rules:
* The first `RunPinned` of the run is its pin; a later one is ignored (a restarted `run start` pins again
  only what it pinned before, and the pin is what grades are compared with).
* Paused after a `RunPaused`, until a `RunResumed` recorded after it.
* A trajectory is quarantined when a `TrajectoriesQuarantined` rule matches it: its id is in the rule's
  list, or its grade's version of the rule's component equals the rule's value and it was graded in the
  rule's window. Rules only add: nothing un-quarantines, and the log keeps each rule with its reason.
* A grader (verifier version, image version) is vouched for up to the latest `GraderCleared.up_to_us`.
  With the pin's `hold_for_clearance`, a trajectory is trainable only once its grader is vouched for at or
  after its grade time; a trajectory that names no versions, or no grade time, cannot be vouched for and
  waits forever (it is held, not trained, which is the safe side).
* A version change is kept once per record (a redelivered `VersionChanged` is the same event id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schemas.run_control import (
    ANY,
    ControlRecord,
    GraderCleared,
    RunPaused,
    RunPinned,
    RunResumed,
    TrajectoriesQuarantined,
    VersionChanged,
)
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import Component, GradeVersions

VERSION = "version"
"""A quarantine rule's component that matches a grade naming the value as any of its versions."""

GraderKey = tuple[str, str]  # (verifier version, image version)


@dataclass(frozen=True, slots=True)
class ControlState:
    run_id: str
    pinned: RunPinned | None = None
    paused: RunPaused | None = None  # the pause in force, if any
    resumed: RunResumed | None = None  # the last resume
    rules: tuple[TrajectoriesQuarantined, ...] = ()
    # grader -> vouched up to (us); left out of the hash (a dict is not hashable), kept in equality
    cleared: Mapping[GraderKey, int] = field(default_factory=dict, hash=False)
    changes: tuple[VersionChanged, ...] = ()

    @property
    def is_paused(self) -> bool:
        return self.paused is not None

    @property
    def holds_for_clearance(self) -> bool:
        return self.pinned is not None and self.pinned.guard.hold_for_clearance

    def quarantine_rule(self, trajectory: TrajectoryCompleted) -> TrajectoriesQuarantined | None:
        """The first rule that quarantines `trajectory`, or None."""
        return next((rule for rule in self.rules if matches(rule, trajectory)), None)

    def vouched(self, trajectory: TrajectoryCompleted) -> bool:
        """Its grader is vouched for at or after its grade time (always true without the hold)."""
        if not self.holds_for_clearance:
            return True
        versions = trajectory.grade_versions
        if versions is None or trajectory.graded_at_us <= 0:
            return False  # an unnamed grader or an unknown grade time: nothing can vouch for it
        up_to = self.cleared.get((versions.verifier, versions.image))
        return up_to is not None and up_to >= trajectory.graded_at_us

    def to_json(self) -> dict[str, object]:
        return {
            "run": self.run_id,
            "pinned": self.pinned is not None,
            "paused": None if self.paused is None else self.paused.reason,
            "quarantine_rules": [
                {"rule": r.rule_id, "component": r.component, "value": r.value, "reason": r.reason}
                for r in self.rules
            ],
            "version_changes": [
                {"component": c.component, "pinned": c.pinned, "seen": c.seen, "task": c.task_id}
                for c in self.changes
            ],
            "cleared": {f"{v[:12]}/{i[:19]}": up_to for (v, i), up_to in sorted(self.cleared.items())},
        }


def grade_version(versions: GradeVersions | None, task_version: str, component: str) -> tuple[str, ...]:
    """What a grade names for a rule's `component` (several for VERSION, none when it names no versions)."""
    if component == Component.TASK:
        return (task_version,)
    if versions is None:
        return (task_version,) if component == VERSION else ()
    named = (versions.verifier, versions.image, versions.tests, versions.reward_config)
    if component == VERSION:
        return (*named, task_version)
    if component in (c.value for c in Component):
        return (versions.of(Component(component)),)
    return ()


def in_window(rule: TrajectoriesQuarantined, graded_at_us: int) -> bool:
    return graded_at_us >= rule.since_us and (rule.until_us is None or graded_at_us < rule.until_us)


def matches(rule: TrajectoriesQuarantined, trajectory: TrajectoryCompleted) -> bool:
    """Whether `rule` quarantines `trajectory` (see the module doc)."""
    meta = trajectory.meta
    if meta.run_id != rule.run_id:
        return False
    if meta.episode_id in rule.episode_ids:
        return True
    if not in_window(rule, trajectory.graded_at_us):
        return False
    if rule.component == ANY:
        return True
    return rule.value in grade_version(trajectory.grade_versions, meta.task_version, rule.component)


def apply(state: ControlState, record: object) -> ControlState:
    """Fold one record of `run.control`; another run's records and other types change nothing."""
    if getattr(record, "run_id", None) != state.run_id:
        return state
    match record:
        case RunPinned():
            return state if state.pinned is not None else dataclasses.replace(state, pinned=record)
        case RunPaused():
            return dataclasses.replace(state, paused=state.paused or record)
        case RunResumed():
            return dataclasses.replace(state, paused=None, resumed=record)
        case TrajectoriesQuarantined():
            if any(rule.rule_id == record.rule_id for rule in state.rules):
                return state  # a redelivered rule
            return dataclasses.replace(state, rules=(*state.rules, record))
        case GraderCleared():
            key = (record.verifier, record.image)
            if state.cleared.get(key, -1) >= record.up_to_us:
                return state
            return dataclasses.replace(state, cleared={**state.cleared, key: record.up_to_us})
        case VersionChanged():
            if any(change.meta.event_id == record.meta.event_id for change in state.changes):
                return state  # a redelivered change
            return dataclasses.replace(state, changes=(*state.changes, record))
    return state


def fold(run_id: str, records: Iterable[ControlRecord | object]) -> ControlState:
    state = ControlState(run_id)
    for record in records:
        state = apply(state, record)
    return state
