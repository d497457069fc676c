"""The guard's decisions, pure: what to write about a run given what its topics say.

The guard watches a run's grader while the run goes on (issue 15; DESIGN.md, "Guarding a long run"):

* **Pinned versions.** Every grade (`RewardAssigned` on `verify.results` or `canary.results`) names its
  versions; one that differs from the run's pin (`RunPinned`) is recorded once per (component, version
  seen, task) as a `VersionChanged` on `run.control`, with an alert.
* **Canaries.** At `canaries_per_minute`, the guard asks for a canary: a known workspace of one of the
  pinned tasks (`CanaryPlan`; the process builds its snapshot and sends the `VerifyRequest` on
  `canary.requests`). Rounds alternate a workspace that must pass (the reference solution) with one that
  must not (the untouched repo, then each known hack in turn), so every second round can vouch for the
  grader. A round is skipped while canaries would take more than `max_canary_share` of the grading
  capacity (the verifiers' busy time over the trailing `SHARE_WINDOW_US`, per verifier seen), and while
  `MAX_OUTSTANDING` canaries are unanswered. An answer becomes a `CanaryGraded` on `canary.grades`.
* **Clearance.** Once a grader (verifier version, image version) graded right a must-pass and a
  must-not-pass canary both asked for after time t, its grades before t are vouched for: `GraderCleared`
  (the learner holds trajectories until then; `actors.guard.control.ControlState.vouched`).
* **A wrong canary** (a must-pass graded below 1.0, a must-not-pass graded 1.0; an `error` verdict is
  an outage, not a wrong grade) raises a critical alert, pauses the run (`RunPaused`, by the pin's
  `pause_on_canary_failure`), and quarantines what that grader graded (`TrajectoriesQuarantined`): by its
  verifier version when that is not the pinned one, else by its image when that is not the pinned one,
  else (the pinned grader itself went wrong) every grade by that verifier since it was last vouched for.
  A faulty grader is never vouched for again.

State is rebuilt from the topics on a restart: the guard's own records read back are observed like the
rest, and every decision checks what the log already holds, so a restarted guard repeats nothing.
Ids and times come from the injected `Origin`; nothing here reads a clock.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from actors.guard import control
from schemas.alerts import Alert, Severity
from schemas.canaries import CanaryGraded
from schemas.common import GENESIS_HASH, EventMeta, Verdict
from schemas.events import RewardAssigned
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.record import Record
from schemas.requests import ResourceLimits, VerifyRequest
from schemas.run_control import GraderCleared, RunPaused, TrajectoriesQuarantined, VersionChanged
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import Component, GradeVersions

SHARE_WINDOW_US = 10 * 60 * 1_000_000  # the trailing window the canaries' share of grading is measured on
MAX_OUTSTANDING = 4  # canaries asked for and not answered yet, at most
LOST_AFTER_US = 15 * 60 * 1_000_000  # a canary unanswered this long is given up (an alert)

GraderKey = tuple[str, str]  # (verifier version, image version)


@dataclass(frozen=True, slots=True, order=True)
class Case:
    """A known workspace kind of the canary library: its name and what its grade must be."""

    name: str  # reference, untouched, hack:<name>
    expect_pass: bool


@dataclass(frozen=True, slots=True)
class CanaryPlan:
    """A canary to send: the process builds the workspace snapshot, then sends `request(snapshot_id)`."""

    canary_id: str
    round: int
    task: TaskPublished
    case: Case
    requested_at_us: int

    def request(self, run_id: str, snapshot_id: str, origin: Origin) -> VerifyRequest:
        meta = origin.event_meta(
            run_id=run_id,
            episode_id=self.canary_id,
            task_id=self.task.task_id,
            task_version=self.task.task_version,
            step=0,
            attempt=1,
            policy_version=0,
            prev_hash=GENESIS_HASH,
            snapshot_id=snapshot_id,
        )
        limits = self.task.limits or ResourceLimits()
        return VerifyRequest(_at(meta, self.requested_at_us), self.task.image, self.task.timeout_s, limits)


@dataclass(frozen=True, slots=True)
class Write:
    """A record for the process to write on the run's `topic` (a base name), keyed by `key`."""

    topic: str
    record: Record
    key: str | None = None


@dataclass
class Asked:
    """A canary asked for (read back from `canary.requests`, or just planned)."""

    round: int
    task_id: str
    task_version: str
    case: Case
    requested_at_us: int


@dataclass
class GraderRecord:
    """What canaries said about one grader."""

    last_pass_ok_us: int = -1  # request time of the latest must-pass canary graded right
    last_reject_ok_us: int = -1  # request time of the latest must-not-pass canary graded right
    cleared_us: int = -1  # the latest clearance written
    faulty: bool = False


@dataclass
class GuardOptions:
    """The guard process's own options (the run's guard settings are the pin's, `RunPinned.guard`)."""

    seed: int = 0


@dataclass
class GuardState:
    run_id: str
    control: control.ControlState = field(init=False)
    tasks: dict[str, TaskPublished] = field(default_factory=dict)
    asked: dict[str, Asked] = field(default_factory=dict)  # canary id -> what was asked
    graded: set[str] = field(default_factory=set)  # canary ids with a CanaryGraded
    lost: set[str] = field(default_factory=set)  # canary ids given up
    rounds: int = 0  # canary rounds asked for
    graders: dict[GraderKey, GraderRecord] = field(default_factory=dict)
    changes: set[tuple[str, str, str]] = field(default_factory=set)  # (component, seen, task) recorded
    grading: deque[tuple[int, int, bool, str]] = field(default_factory=deque)  # (at, us, canary, grader)
    trajectories: dict[str, TrajectoryCompleted] = field(default_factory=dict)  # episode id -> trajectory
    canary_us: int = 0  # canary grading time, all told
    episode_us: int = 0  # episode grading time, all told
    next_due_us: int | None = None

    def __post_init__(self) -> None:
        self.control = control.ControlState(self.run_id)

    def grader(self, key: GraderKey) -> GraderRecord:
        return self.graders.setdefault(key, GraderRecord())

    @property
    def outstanding(self) -> list[str]:
        return [c for c in self.asked if c not in self.graded and c not in self.lost]

    def canary_share(self, now_us: int) -> float:
        """Canary grading time over the trailing window, as a share of the capacity of the verifiers seen
        grading in it (each busy the whole window is a share of 1)."""
        since = now_us - SHARE_WINDOW_US
        recent = [g for g in self.grading if g[0] >= since]
        verifiers = max(1, len({g[3] for g in recent}))
        canary = sum(g[1] for g in recent if g[2])
        return canary / (SHARE_WINDOW_US * verifiers)


class Guard:
    """Observe records of the run's topics; decide what to write. The process carries the writes out."""

    def __init__(
        self,
        run_id: str,
        origin: Origin,
        cases_of: Mapping[str, Sequence[Case]] | None = None,
        options: GuardOptions | None = None,
    ) -> None:
        self.state = GuardState(run_id)
        self.origin = origin
        self.cases_of = cases_of or {}  # task id -> its canary cases (what the library builds for it)
        self.options = options or GuardOptions()

    @property
    def run_id(self) -> str:
        return self.state.run_id

    # -- observing ---------------------------------------------------------------------------------------

    def observe(self, topic: str, value: object) -> list[Write]:
        """Fold a decoded record read from the run's topic `topic` (a base name); the writes it calls for."""
        state = self.state
        if isinstance(value, TaskPublished):
            state.tasks[value.task_id] = value
            return []
        if getattr(value, "run_id", getattr(getattr(value, "meta", None), "run_id", None)) != self.run_id:
            return []
        if topic == "run.control":
            state.control = control.apply(state.control, value)
            if isinstance(value, VersionChanged):  # recorded before: not to be recorded again
                state.changes.add((value.component, value.seen, value.task_id or ""))
            return []
        if isinstance(value, CanaryGraded):
            self._observe_canary_grade(value)
            return []
        if isinstance(value, VerifyRequest) and topic == "canary.requests":
            self._observe_asked(value)
            return []
        if isinstance(value, TrajectoryCompleted):
            state.trajectories.setdefault(value.meta.episode_id, value)
            return []
        if isinstance(value, RewardAssigned):
            return self._observe_grade(topic, value)
        return []

    def _observe_asked(self, request: VerifyRequest) -> None:
        meta = request.meta
        if meta.episode_id in self.state.asked:
            return
        round_, case = _parse_canary_id(meta.episode_id)
        self.state.asked[meta.episode_id] = Asked(
            round_, meta.task_id, meta.task_version, case, meta.occurred_at_us
        )
        self.state.rounds = max(self.state.rounds, round_ + 1)

    def _observe_canary_grade(self, graded: CanaryGraded) -> None:
        state = self.state
        state.graded.add(graded.canary_id)
        if graded.versions is None:
            return
        record = state.grader((graded.versions.verifier, graded.versions.image))
        if graded.verdict is Verdict.ERROR:
            return
        if not graded.ok:
            record.faulty = True
        elif graded.expect_pass:
            record.last_pass_ok_us = max(record.last_pass_ok_us, graded.requested_at_us)
        else:
            record.last_reject_ok_us = max(record.last_reject_ok_us, graded.requested_at_us)

    def _observe_grade(self, topic: str, reward: RewardAssigned) -> list[Write]:
        state = self.state
        canary = topic == "canary.results"
        grader = reward.meta.producer.instance
        state.grading.append((reward.meta.occurred_at_us, reward.duration_us, canary, grader))
        while state.grading and state.grading[0][0] < reward.meta.occurred_at_us - SHARE_WINDOW_US:
            state.grading.popleft()
        if canary:
            state.canary_us += reward.duration_us
        else:
            state.episode_us += reward.duration_us
        writes = self._version_changes(reward)
        if canary:
            writes += self._judge(reward)
        return writes

    # -- versions ----------------------------------------------------------------------------------------

    def _version_changes(self, reward: RewardAssigned) -> list[Write]:
        pinned = self.state.control.pinned
        if pinned is None:
            return []
        meta, versions = reward.meta, reward.versions
        seen: list[tuple[Component, str, str, str | None]] = []  # (component, pinned, seen, task)
        task = pinned.task(meta.task_id)
        if task is None or task.task_version != meta.task_version:
            seen.append((Component.TASK, "" if task is None else task.task_version, meta.task_version,
                         meta.task_id))  # fmt: skip
        if versions is None:
            seen.append((Component.VERIFIER, pinned.verifier, "(names no versions)", None))
        else:
            seen += [
                (Component.VERIFIER, pinned.verifier, versions.verifier, None),
                (Component.IMAGE, pinned.image, versions.image, None),
                (Component.REWARD_CONFIG, pinned.reward_config, versions.reward_config, None),
            ]
            if task is not None:
                seen.append((Component.TESTS, task.tests, versions.tests, meta.task_id))
        writes: list[Write] = []
        for component, was, now, task_id in seen:
            key = (component.value, now, task_id or "")
            if was == now or key in self.state.changes:
                continue
            self.state.changes.add(key)
            change = VersionChanged(
                self.origin.record_meta(), self.run_id, component.value, was, now, task_id,
                meta.episode_id, meta.producer,
            )  # fmt: skip
            writes += [Write("run.control", change), self._alert(
                "version_changed", Severity.WARNING,
                f"{component.value} version changed: pinned {was[:12] or '(none)'}, graded with {now[:12]}"
                + (f" (task {task_id})" if task_id else "") + f" by {meta.producer.instance}",
                {"component": component.value, "pinned": was, "seen": now, "task": task_id or ""},
            )]  # fmt: skip
        return writes

    # -- canaries ----------------------------------------------------------------------------------------

    def _judge(self, reward: RewardAssigned) -> list[Write]:
        state = self.state
        canary_id = reward.meta.episode_id
        asked = state.asked.get(canary_id)
        if asked is None or canary_id in state.graded:
            return []  # not one of ours (or asked before the log we read), or graded already
        # By verdict, not by reward: a reward configuration may set what a pass is worth.
        passed = reward.verdict is Verdict.PASS
        ok = passed if asked.case.expect_pass else not passed
        graded = CanaryGraded(
            self.origin.record_meta(), self.run_id, canary_id, asked.round, asked.task_id,
            asked.task_version, asked.case.name, asked.case.expect_pass,
            ok and reward.verdict is not Verdict.ERROR, reward.reward, reward.verdict, reward.passed,
            reward.total, reward.versions, reward.meta.producer, asked.requested_at_us,
            reward.meta.occurred_at_us, reward.duration_us,
        )  # fmt: skip
        known_faulty = (
            reward.versions is not None
            and self.state.grader((reward.versions.verifier, reward.versions.image)).faulty
        )
        self._observe_canary_grade(graded)
        writes = [Write("canary.grades", graded)]
        if reward.verdict is Verdict.ERROR:
            outage = self._alert(
                "canary_error", Severity.WARNING,
                f"canary {asked.case.name} on {asked.task_id} could not be graded by "
                f"{reward.meta.producer.instance}", {"canary": canary_id, "task": asked.task_id},
            )  # fmt: skip
            return [*writes, outage]
        if reward.versions is None:
            return writes  # a grader that names no versions is already a version change on record
        if not ok:
            if known_faulty:  # alerted, paused and quarantined already: the grade is on record
                return writes
            return [*writes, *self._wrong(graded, reward.versions)]
        return [*writes, *self._clear(reward.versions)]

    def _clear(self, versions: GradeVersions) -> list[Write]:
        key = (versions.verifier, versions.image)
        record = self.state.grader(key)
        up_to = min(record.last_pass_ok_us, record.last_reject_ok_us)
        recorded = self.state.control.cleared.get(key, -1)
        if record.faulty or up_to < 0 or up_to <= max(record.cleared_us, recorded):
            return []
        record.cleared_us = up_to
        return [Write("run.control", GraderCleared(self.origin.record_meta(), self.run_id, *key, up_to))]

    def _wrong(self, graded: CanaryGraded, versions: GradeVersions) -> list[Write]:
        state, pinned = self.state, self.state.control.pinned
        expected = "pass" if graded.expect_pass else "not pass"
        summary = (
            f"canary {graded.case} on {graded.task_id} must {expected} but was graded {graded.verdict.value} "
            f"({graded.reward:+.2f}) by {graded.grader.instance}, verifier {versions.verifier[:12]}, "
            f"image {versions.image[:19]}"
        )
        alert = self._alert("canary_failed", Severity.CRITICAL, summary, {
            "canary": graded.canary_id, "case": graded.case, "task": graded.task_id,
            "verifier": versions.verifier, "image": versions.image,
        })  # fmt: skip
        writes = [alert]
        alert_record = alert.record
        assert isinstance(alert_record, Alert)
        if (pinned is None or pinned.guard.pause_on_canary_failure) and not state.control.is_paused:
            paused = RunPaused(self.origin.record_meta(), self.run_id, summary, alert_record.alert_id)
            state.control = control.apply(state.control, paused)
            writes.append(Write("run.control", paused))
        rule = self._quarantine_rule(
            graded,
            versions,
            pinned_verifier=None if pinned is None else pinned.verifier,
            pinned_image=None if pinned is None else pinned.image,
        )
        if rule is not None:
            state.control = control.apply(state.control, rule)
            writes.append(Write("run.control", rule))
        return writes

    def _quarantine_rule(
        self,
        graded: CanaryGraded,
        versions: GradeVersions,
        *,
        pinned_verifier: str | None,
        pinned_image: str | None,
    ) -> TrajectoriesQuarantined | None:
        """What the faulty grader graded: by the version that is not the pinned one, else since the pinned
        grader was last vouched for. None when a rule already covers it."""
        since = 0
        if versions.verifier != pinned_verifier:
            component, value = Component.VERIFIER.value, versions.verifier
        elif versions.image != pinned_image:
            component, value = Component.IMAGE.value, versions.image
        else:
            component, value = Component.VERIFIER.value, versions.verifier
            since = max(0, self.state.control.cleared.get((versions.verifier, versions.image), 0))
        for rule in self.state.control.rules:
            if rule.component == component and rule.value == value and rule.since_us <= since:
                return None
        reason = f"canary {graded.canary_id} ({graded.case} on {graded.task_id}) graded wrongly"
        draft = TrajectoriesQuarantined(
            self.origin.record_meta(), self.run_id, f"guard-{graded.canary_id}", component, value, since,
            None, reason, (),
        )  # fmt: skip
        matched = tuple(sorted(e for e, t in self.state.trajectories.items() if control.matches(draft, t)))
        return TrajectoriesQuarantined(
            draft.meta, draft.run_id, draft.rule_id, component, value, since, None, draft.reason, matched
        )

    def tick(self, now_us: int) -> tuple[list[Write], list[CanaryPlan]]:
        """Time passed: canaries lost, and the next canary if one is due."""
        state = self.state
        writes: list[Write] = []
        for canary_id in state.outstanding:
            asked = state.asked[canary_id]
            if now_us - asked.requested_at_us > LOST_AFTER_US:
                state.lost.add(canary_id)
                writes.append(self._alert(
                    "canary_lost", Severity.WARNING,
                    f"canary {canary_id} asked {(now_us - asked.requested_at_us) / 60e6:.0f} min ago has no "
                    "grade: are the verifiers serving canary.requests?", {"canary": canary_id},
                ))  # fmt: skip
        return writes, self._plan(now_us)

    def _plan(self, now_us: int) -> list[CanaryPlan]:
        state, pinned = self.state, self.state.control.pinned
        if pinned is None or pinned.guard.canaries_per_minute <= 0:
            return []
        interval_us = int(60_000_000 / pinned.guard.canaries_per_minute)
        if state.next_due_us is None:
            last = max((a.requested_at_us for a in state.asked.values()), default=None)
            state.next_due_us = now_us if last is None else last + interval_us
        if now_us < state.next_due_us or len(state.outstanding) >= MAX_OUTSTANDING:
            return []
        if state.canary_share(now_us) > pinned.guard.max_canary_share:
            state.next_due_us = now_us + interval_us  # over budget: try again a round later
            return []
        plan = self._next_canary(now_us, [t.task_id for t in pinned.tasks if t.task_id in state.tasks])
        state.next_due_us = now_us + interval_us
        if plan is None:
            return []
        state.asked[plan.canary_id] = Asked(
            plan.round, plan.task.task_id, plan.task.task_version, plan.case, now_us
        )
        state.rounds = plan.round + 1
        return [plan]

    def _next_canary(self, now_us: int, task_ids: list[str]) -> CanaryPlan | None:
        """Round r: even rounds a must-pass case, odd ones the must-not-pass cases in turn; the task drawn
        from the pinned tasks that have such a case, seeded by (seed, round)."""
        round_ = self.state.rounds
        want_pass = round_ % 2 == 0
        candidates = sorted(
            (task_id, case)
            for task_id in task_ids
            for case in self.cases_of.get(task_id, ())
            if case.expect_pass == want_pass
        )
        if not candidates:
            return None
        rng = random.Random(f"{self.options.seed}:canary:{round_}")
        if want_pass:
            task_id, case = rng.choice(candidates)
        else:
            names = sorted({case.name for _, case in candidates})
            name = names[(round_ // 2) % len(names)]
            task_id, case = rng.choice([c for c in candidates if c[1].name == name])
        canary_id = canary_id_of(round_, task_id, case)
        return CanaryPlan(canary_id, round_, self.state.tasks[task_id], case, now_us)

    def _alert(self, rule: str, severity: Severity, summary: str, labels: dict[str, str]) -> Write:
        alert = Alert(
            self.origin.record_meta(), self.run_id, self.origin.ids.new_id(), rule, severity, summary,
            labels=labels,
        )  # fmt: skip
        return Write("alerts", alert)


def canary_id_of(round_: int, task_id: str, case: Case) -> str:
    """`canary/000012/+/reference/task-id`: the round, whether it must pass, the case and the task."""
    return f"canary/{round_:06d}/{'+' if case.expect_pass else '-'}/{case.name}/{task_id}"


def _parse_canary_id(canary_id: str) -> tuple[int, Case]:
    parts = canary_id.split("/", 4)
    if len(parts) != 5 or parts[0] != "canary" or not parts[1].isdigit() or parts[2] not in "+-":
        return -1, Case(canary_id, expect_pass=False)
    return int(parts[1]), Case(parts[3], expect_pass=parts[2] == "+")


def _at(meta: EventMeta, at_us: int) -> EventMeta:
    return dataclasses.replace(meta, occurred_at_us=at_us)
