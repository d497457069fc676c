"""The verifier's logic: answer a `VerifyRequest` with a `RewardAssigned`, grading the final snapshot.

The request names the task (`meta.task_id`, `meta.task_version`) and the final workspace
(`meta.snapshot_id`); the answer echoes the request's header (episode, step, attempt, chain head, snapshot)
and carries the grade: reward, verdict, passed/total, the failed test ids, the tampered paths and the tamper
signals (evidence lines of tampering seen while the tests ran), so that tampering is a fact in the log, not
only a number. The reward is composed by the worker's reward configuration (`actors.tasks.reward_config`;
the default is the brief's rule): the outcome's share and every measured component are recorded apart,
with the configuration's version in `versions`, so each can be recomputed and checked. Each list is
capped (`schemas.budget.fit_reward`: the record fits its budget whatever the graded code made the harness
see) and made encodable (a lone surrogate from a name or a print never makes
the -1.0 unencodable); the report keeps the grade whole. A JSON report (the grade, the detail of an error,
the tail of the build or harness output) goes to the object store, referenced by `report`.

Whatever stops grading (a task not on hand at that version, no snapshot, a snapshot missing from the
store, a sandbox failure) is answered with verdict `error` and reward 0.0, which the learner must not train
on (`Grade.trainable`), with the reason in the report; the request is not dead-lettered, so the episode
ends at once with the reason on record instead of timing out.

Idempotent: a grade is a function of (task version, snapshot, image), so it is kept (LRU, errors
excepted) and a redelivered request, or another episode ending in the same tree, is answered from it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from actors.tasks.reward import error_grade
from actors.tasks.reward_config import DEFAULT as DEFAULT_REWARD
from actors.tasks.reward_config import (
    Composed,
    RewardConfig,
    clean,
    compose,
    efficiency,
    memory,
    no_leftovers,
    small_change,
    speed,
)
from actors.tasks.spec import Task
from actors.tasks.verify import Resources, Verification
from actors.verifier.faults import Fault, inject
from actors.verifier.grading import Grader
from actors.verifier.judge import Judge
from actors.verifier.tasks import TaskSource, TaskUnavailable
from sandbox_agent.limits import MIB
from schemas import topics
from schemas.blobs import BlobRef, ObjectStore
from schemas.budget import fit_reward
from schemas.common import Verdict
from schemas.events import RewardAssigned
from schemas.fsnames import to_wire
from schemas.origin import Origin
from schemas.progress import StepGraded
from schemas.requests import VerifyRequest
from schemas.versions import GradeVersions
from streams.kafka.request_loop import Route

log = logging.getLogger(__name__)

ROUTE = Route(VerifyRequest, topics.VERIFY_REQUESTS, topics.VERIFY_RESULTS)
# The guard's canaries: graded exactly like an episode's workspace, answered beside the episodes' grades.
CANARY_ROUTE = Route(VerifyRequest, topics.CANARY_REQUESTS, topics.CANARY_RESULTS)
# Intermediate workspaces the owner asks to have graded beside its episodes (process rewards).
PROGRESS_ROUTE = Route(VerifyRequest, topics.PROGRESS_REQUESTS, topics.PROGRESS_RESULTS)
VERIFIER_ID = "trialog-verify/1"  # the grading rules' identity: bump when they change what a grade means
REPORT_MEDIA_TYPE = "application/json"
DEFAULT_CACHE = 1024

GradeKey = tuple[str, str, str, str]


class VerifierWorker:
    def __init__(
        self,
        tasks: TaskSource,
        grader: Grader,
        objects: ObjectStore,
        origin: Origin,
        *,
        verifier: str = VERIFIER_ID,
        cache_size: int = DEFAULT_CACHE,
        versions: Callable[[Task, str | None], GradeVersions] | None = None,
        fault: Fault | None = None,
        reward: RewardConfig = DEFAULT_REWARD,
        judge: Judge | None = None,
        progress_grader: Grader | None = None,
    ) -> None:
        self.tasks = tasks
        self.grader = grader
        self.objects = objects
        self.origin = origin
        self.verifier = verifier
        self.cache_size = cache_size
        self.versions = versions
        self.fault = fault
        self.reward = reward
        self.judge = judge  # a model judge (`actors.verifier.judge`): the judge component, when given
        # Grades intermediate workspaces (a low-priority grader: nothing waits for them); None: `grader`.
        self.progress_grader = progress_grader
        self._graded: OrderedDict[GradeKey, Verification] = OrderedDict()
        self._lock = threading.Lock()

    def handle(self, request: VerifyRequest) -> RewardAssigned:
        return self._answer(request, cached=True, composed=True)

    def handle_canary(self, request: VerifyRequest) -> RewardAssigned:
        """A canary is graded afresh every time: an answer from the cache would vouch for the grader as it
        was when the grade was cached, not as it is now. Its reward is the outcome alone: a canary checks
        the grader, and has no steps to be efficient with."""
        return self._answer(request, cached=False, composed=False)

    def handle_progress(self, request: VerifyRequest) -> StepGraded:
        """An intermediate workspace's grade: passed/total and the verdict, nothing composed (a process
        reward is the learner's: a change in pass rate). Graded like a final workspace, from the same cache,
        so an untouched workspace or a step that changed nothing costs no sandbox."""
        started = time.monotonic()
        grade = self.verification(request, grader=self.progress_grader).grade
        duration_us = int((time.monotonic() - started) * 1_000_000)
        return StepGraded(
            self.origin.reply_meta(request.meta), Verdict(grade.verdict.value), grade.passed, grade.total,
            self._versions(request), duration_us,
        )  # fmt: skip

    def _answer(self, request: VerifyRequest, *, cached: bool, composed: bool) -> RewardAssigned:
        started = time.monotonic()
        verification = self.verification(request, cached=cached)
        if self.fault is not None:
            verification = inject(self.fault, verification)
        graded = verification.grade
        try:
            if composed:
                components = {**measured(request, verification), **self._judged(request, verification)}
                reward = compose(self.reward, graded.verdict, graded.passed, graded.total, components)
            else:
                reward = compose(self.reward.outcome_only(), graded.verdict, graded.passed, graded.total, {})
        except ValueError as exc:  # a weighted component this request cannot give: never train on a guess
            verification = _error(f"reward_config: {exc}", started)
            reward = compose(self.reward, verification.grade.verdict, 0, 0, {})
        duration_us = int((time.monotonic() - started) * 1_000_000)
        answer = reward_assigned(
            self.origin, request, verification, self.verifier, self._report(request, verification, reward)
        )
        return dataclasses.replace(
            answer,
            reward=reward.reward,
            outcome_reward=reward.outcome,
            components=tuple(reward.components.items()),
            versions=self._versions(request),
            duration_us=duration_us,
        )

    def _judged(self, request: VerifyRequest, verification: Verification) -> dict[str, float]:
        """The model judge's score of the change, when the worker has a judge and the grade is one (a
        judge failing is logged and measures nothing: it never costs the grade)."""
        if self.judge is None or not verification.grade.trainable:
            return {}
        try:
            task = self.tasks.get(request.meta.task_id, request.meta.task_version)
            return {"judge": self.judge(task.spec.instruction, verification.diff)}
        except Exception:
            log.exception("the model judge failed on %s", request.meta.episode_id)
            return {}

    def _versions(self, request: VerifyRequest) -> GradeVersions | None:
        """The versions that graded `request` (None when it could not be graded for want of its task)."""
        if self.versions is None:
            return None
        try:
            task = self.tasks.get(request.meta.task_id, request.meta.task_version)
        except TaskUnavailable:
            return None
        return self.versions(task, request.image or None)

    def verification(
        self, request: VerifyRequest, *, cached: bool = True, grader: Grader | None = None
    ) -> Verification:
        meta = request.meta
        started = time.monotonic()
        try:
            task = self.tasks.get(meta.task_id, meta.task_version)
        except TaskUnavailable as exc:
            log.warning("cannot grade %s: %s", meta.episode_id, exc.detail)
            return _error(f"{exc.reason}: {exc.detail}", started)
        if meta.snapshot_id is None:
            return _error("no_snapshot: the request names no workspace snapshot to grade", started, task)
        key = (task.id, task.version, meta.snapshot_id, request.image)
        with self._lock:
            known = self._graded.get(key) if cached else None
            if known is not None:
                self._graded.move_to_end(key)
                return known
        try:
            graded = (grader or self.grader)(task, meta.snapshot_id, request.image or None)
        except Exception as exc:  # any failure to grade is an `error` verdict, never a crash
            log.exception("grading %s step %d failed", meta.episode_id, meta.step)
            return _error(f"grading_failed: {type(exc).__name__}: {exc}", started, task)
        if graded.grade.trainable:
            with self._lock:
                self._graded[key] = graded
                while len(self._graded) > self.cache_size:
                    self._graded.popitem(last=False)
        return graded

    def _report(self, request: VerifyRequest, verification: Verification, reward: Composed) -> BlobRef | None:
        meta = request.meta
        body = {
            "verifier": self.verifier,
            "task_id": meta.task_id,
            "task_version": meta.task_version,
            "snapshot_id": meta.snapshot_id,
            "image": request.image,
            **verification.to_json(),
            "reward": reward.reward,
            "outcome_reward": reward.outcome,
            "components": dict(reward.components),
            "reward_config": self.reward.canonical(),
            "reward_config_version": reward.config_version,
            "harness_exit": verification.harness_exit,
            "log": verification.log,
        }
        try:
            return self.objects.put(json.dumps(body, sort_keys=True).encode(), REPORT_MEDIA_TYPE)
        except OSError:
            log.exception("could not store the grading report of %s", meta.episode_id)
            return None


def measured(request: VerifyRequest, verification: Verification) -> dict[str, float]:
    """The components this request and grade give (`actors.tasks.reward_config.COMPONENTS`), whatever
    their weights: each is recorded, so a configuration can be judged on a run before it is used."""
    components: dict[str, float] = {}
    if request.step_budget > 0:
        used = min(request.steps_used, request.step_budget)
        components["efficiency"] = efficiency(used, request.step_budget)
    measures = verification.resources
    if measures.test_wall_s is not None and request.timeout_s > 0:
        components["speed"] = speed(measures.test_wall_s, request.timeout_s)
    if measures.memory_peak_bytes is not None and request.limits.memory_mb > 0:
        components["memory"] = memory(measures.memory_peak_bytes, request.limits.memory_mb * MIB)
    if measures.left_running is not None:
        components["no_leftovers"] = no_leftovers(measures.left_running)
    return {**components, **workspace_components(measures)}


def workspace_components(measures: Resources) -> dict[str, float]:
    """The components the graded workspace itself decides (the same on every regrade of it): the size of
    the change, and the static findings where they were measured. The recheck measures these again."""
    components: dict[str, float] = {}
    if measures.change is not None:
        components["small_change"] = small_change(measures.change.lines)
    if measures.lint_new is not None:
        components["lint"] = clean(measures.lint_new)
    if measures.types_new is not None:
        components["types"] = clean(measures.types_new)
    return components


def _error(detail: str, started: float, task: Task | None = None) -> Verification:
    total = len(task.test_ids) if task is not None else 0
    return Verification(error_grade(detail, total=total), time.monotonic() - started)


def reward_assigned(
    origin: Origin,
    request: VerifyRequest,
    verification: Verification,
    verifier: str = VERIFIER_ID,
    report: BlobRef | None = None,
) -> RewardAssigned:
    """The answer to `request`: its header echoed, the grade's fields."""
    grade = verification.grade
    answer = RewardAssigned(
        meta=origin.reply_meta(request.meta),
        reward=grade.reward,
        verdict=Verdict(grade.verdict.value),
        passed=grade.passed,
        total=grade.total,
        failed_tests=tuple(map(_utf8, grade.failed_tests)),
        tampered_paths=grade.tampered_paths,
        verifier=verifier,
        report=report,
        tamper_signals=tuple(map(_fsname_safe, grade.tamper_signals)),
    )
    return fit_reward(answer)


def _utf8(line: str) -> str:
    """A test id as text UTF-8 can carry: an id naming a file whose name is not UTF-8 holds a lone
    surrogate, which would make the record, and with it the grade, unencodable; it is written `\\udcXX`."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return line.encode("utf-8", "backslashreplace").decode("utf-8")
    return line


def _fsname_safe(line: str) -> str:
    """An evidence line as the lossless name form (`schemas.fsnames`) carries it: any `os.fsdecode` text;
    a surrogate `os.fsdecode` never makes (the graded code can print anything) is written `\\udXXX`."""
    try:
        to_wire(line)
    except UnicodeEncodeError:
        return line.encode("utf-8", "backslashreplace").decode("utf-8")
    return line
