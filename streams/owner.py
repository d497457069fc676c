"""The episode owner's decisions, pure: (state, input, origin, now) -> effects.

Each episode is a virtual actor. Only the streams worker owning its partition appends to `episode.events`;
it calls these functions for every input (a command, a worker's answer, a timer tick) and carries out the
returned `Effects`: append `events` (exact bytes, already chained), send `requests`, publish `trajectory`,
dead-letter or drop a `rejected` input, and store the new `OwnerState`.

Rules, in one place:

* An answer is accepted only when it answers the request outstanding: same kind, step and attempt, issued
  from the current chain head (`meta.prev_hash`). An answer already applied is a `duplicate` (same event id,
  or same step and attempt); an answer for a filled slot from another attempt, or for an attempt that is
  no longer outstanding, is `stale_attempt`. Rejected inputs change nothing.
* The episode state advances only through `schemas.fold.apply` on the events emitted, so the live state is
  the replayed state.
* Requests carry the idempotency key (episode_id, step, attempt) and the chain head in their `EventMeta`;
  attempts count from 1. A request not answered by its deadline is re-issued as attempt + 1 with a doubled
  wait (`streams.timers`), up to `EpisodeConfig.max_attempts`; then the episode fails with
  `policy_timeout`, `sandbox_timeout` or `verifier_error` (retryable: the task is not at fault).
* Records the owner creates are stamped `occurred_at_us = now_us`: one reading per input, taken by the
  caller, so deadlines and durations agree with the log. The `Origin` gives ids and the producer.
* The task's initial workspace snapshot goes into `EpisodeStarted.meta.snapshot_id`, which the fold keeps
  as the restore point until the first `StepExecuted` replaces it: step 0 restores the task's tree.

Step limit: `max_steps` bounds the actions the policy is asked for, submit included. When the
`max_steps`-th action is not a submit it is still executed, and then the episode is *truncated*: instead of
another PolicyRequest the owner asks the verifier to grade the workspace as it is, exactly as after a
submit, and the episode completes with that reward (the fold moves to awaiting_verification on that
step's StepExecuted). No submit is invented: the trajectory holds only actions the policy sampled, and a
small model that never learned to submit still yields graded, learnable trajectories.

Invalid replies: an ActionProposed whose action is an `InvalidReply` (the reply was no tool call) is a
step that no sandbox executes. The owner answers it itself, in the same effects: a StepExecuted with exit
code 2 and the error for the model on stderr, at the same restore point; then the next request as usual.

Ungradable episodes: a RewardAssigned with verdict `error` (the verifier could not grade: the task was
not on hand, the snapshot was missing, the sandbox failed; `Grade.trainable` is false) is appended, and the
episode then fails with `verifier_error` (retryable) into `trajectories.failed`: it never reaches the
learner, where its 0.0 would be trained on as if the policy had earned it.

Record budget (`schemas.budget`): each SandboxRequest asks for the step's share of the episode's inline
output budget, each StepExecuted is fitted to it in encoded bytes before it is appended, an ActionProposed
over `ACTION_MAX` is refused (`oversized`), the grade's lists are capped, and once the episode has logged
`EPISODE_LOG_BUDGET` bytes no further action is asked for: the workspace is graded as at the step limit.
So the row, the requests and the trajectory stay under the broker's record limit for any run.

Failure answers: a sandbox worker that cannot do what a request asks answers with an `EpisodeFailed` whose
header echoes the request (`on_sandbox_failed`). `invalid_action` (a write outside the workspace, a patch
that does not apply) fails the episode at once: the policy is at fault and a retry would fail the same way.
`sandbox_crash` (the sandbox was lost under the step) re-issues the step at once as the next attempt, which
restores the last snapshot into a new sandbox, and fails the episode after `max_attempts`. The answer is
checked like any other (right step, attempt and chain head); it is never appended itself: the owner writes
the episode's EpisodeFailed. A worker may answer no other failure class on `sandbox.results`.

Benign rejections (`BENIGN`: an answer already applied, a late answer of a superseded attempt, an answer
after the episode ended) are what at-least-once delivery produces after any crash; the caller counts them
and moves on. The others point at a bug or a forged record and are dead-lettered by the caller.
An `AbortEpisode` for an episode that has not started is rejected as `unknown_episode` (an EpisodeFailed
needs the task id and version it lacks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from schemas.actions import InvalidReply, Submit
from schemas.budget import (
    ACTION_MAX,
    EPISODE_LOG_BUDGET,
    fit_output,
    fit_reward,
    inline_output_bytes,
    stream_limit,
)
from schemas.chain import digest
from schemas.codec import default_codec
from schemas.commands import AbortEpisode, StartEpisode
from schemas.common import EpisodeConfig, EventMeta, FailureClass, Output, Verdict
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeEvent,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
)
from schemas.fold import FoldError, apply
from schemas.origin import Origin
from schemas.record import AvroDict
from schemas.requests import PolicyRequest, ResourceLimits, SamplingParams, SandboxRequest, VerifyRequest
from schemas.state import EpisodeState, Phase
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.step_grading import OFF as NO_STEP_GRADING
from streams.step_grading import StepGrading
from streams.timers import answer_deadline_us

Request = PolicyRequest | SandboxRequest | VerifyRequest
Trajectory = TrajectoryCompleted | TrajectoryFailed
Answer = ActionProposed | StepExecuted | RewardAssigned


class RequestKind(StrEnum):
    POLICY = "policy"
    SANDBOX = "sandbox"
    VERIFY = "verify"


_TIMEOUT_FAILURE = {
    RequestKind.POLICY: FailureClass.POLICY_TIMEOUT,
    RequestKind.SANDBOX: FailureClass.SANDBOX_TIMEOUT,
    RequestKind.VERIFY: FailureClass.VERIFIER_ERROR,
}
# Infrastructure failures: the task is not at fault, so a new episode of it may be tried.
_RETRYABLE = frozenset({*_TIMEOUT_FAILURE.values(), FailureClass.SANDBOX_CRASH})
# The failures a sandbox worker may answer with, and whether the owner retries the step (next attempt).
SANDBOX_FAILURES: Mapping[FailureClass, bool] = {
    FailureClass.SANDBOX_CRASH: True,
    FailureClass.INVALID_ACTION: False,
}


class Rejection(StrEnum):
    """Why an input was ignored (for logs and dead letters); the state is unchanged."""

    UNKNOWN_EPISODE = "unknown_episode"  # not started, or another episode/run/task version
    DUPLICATE = "duplicate"  # already applied
    STALE_ATTEMPT = "stale_attempt"  # an attempt that is no longer outstanding
    WRONG_STEP = "wrong_step"
    WRONG_CHAIN_HEAD = "wrong_chain_head"
    NOT_OUTSTANDING = "not_outstanding"  # no request of this kind is waiting for an answer
    ENDED = "ended"  # the episode is completed or failed
    INVALID = "invalid"  # passed the checks but the fold refused it (a forged or corrupt answer)
    UNEXPECTED_FAILURE = "unexpected_failure"  # a failure class the answering worker may not report
    OVERSIZED = "oversized"  # an action over `schemas.budget.ACTION_MAX` encoded bytes: never appended


# What redelivery after a crash produces by itself: counted by the caller, not dead-lettered.
BENIGN = frozenset({Rejection.DUPLICATE, Rejection.STALE_ATTEMPT, Rejection.ENDED})


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """What the owner knows of a task (filled from the `tasks` topic)."""

    task_id: str
    task_version: str
    instruction: str
    image: str
    timeout_s: float  # wall-clock limit of the test run
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    initial_snapshot_id: str | None = None  # the task's repo/ as a snapshot (None: the image's workspace)

    def to_record(self) -> AvroDict:
        return {
            "task_id": self.task_id,
            "task_version": self.task_version,
            "instruction": self.instruction,
            "image": self.image,
            "timeout_s": self.timeout_s,
            "limits": self.limits.to_record(),
            "initial_snapshot_id": self.initial_snapshot_id,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> TaskInfo:
        return cls(
            rec["task_id"],
            rec["task_version"],
            rec["instruction"],
            rec["image"],
            rec["timeout_s"],
            ResourceLimits.from_record(rec["limits"]),
            rec["initial_snapshot_id"],
        )


@dataclass(frozen=True, slots=True)
class Outstanding:
    """The one request the episode waits for; its (step, attempt) is the key a valid answer echoes."""

    kind: RequestKind
    step: int
    attempt: int
    issued_at_us: int
    deadline_us: int

    def to_record(self) -> AvroDict:
        return {
            "kind": self.kind.value,
            "step": self.step,
            "attempt": self.attempt,
            "issued_at_us": self.issued_at_us,
            "deadline_us": self.deadline_us,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Outstanding:
        return cls(
            RequestKind(rec["kind"]), rec["step"], rec["attempt"], rec["issued_at_us"], rec["deadline_us"]
        )


@dataclass(frozen=True, slots=True)
class OwnerState:
    """The folded episode plus what the fold does not hold: the outstanding request and the request inputs.

    The episode's config, image, group and policy version are in `episode.started` (they are logged)."""

    episode: EpisodeState = field(default_factory=EpisodeState)
    task: TaskInfo | None = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    outstanding: Outstanding | None = None
    # Bytes of the episode's events as logged (the row's events), for the record budget; derived from the
    # row's events when a row is read, so it is not in `to_record`.
    logged_bytes: int = field(default=0, compare=False)

    @classmethod
    def new(cls, episode_id: str) -> OwnerState:
        return cls(EpisodeState.new(episode_id))

    def to_record(self) -> AvroDict:
        """Plain-dict form (Avro shape) for the `episodes` table; encoding it needs a schema of its own."""
        return {
            "episode": self.episode.to_record(),
            "task": None if self.task is None else self.task.to_record(),
            "sampling": self.sampling.to_record(),
            "outstanding": None if self.outstanding is None else self.outstanding.to_record(),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> OwnerState:
        task, outstanding = rec["task"], rec["outstanding"]
        return cls(
            EpisodeState.from_record(rec["episode"]),
            None if task is None else TaskInfo.from_record(task),
            SamplingParams.from_record(rec["sampling"]),
            None if outstanding is None else Outstanding.from_record(outstanding),
        )


@dataclass(frozen=True, slots=True)
class Appended:
    """An event to append to `episode.events`: its exact bytes and their digest (the next prev_hash)."""

    event: EpisodeEvent
    data: bytes
    digest: str


@dataclass(frozen=True, slots=True)
class Effects:
    state: OwnerState
    events: tuple[Appended, ...] = ()
    requests: tuple[Request, ...] = ()
    trajectory: Trajectory | None = None
    rejected: Rejection | None = None
    # Intermediate workspaces to grade (`progress.requests`, streams.step_grading): sent and never awaited,
    # so no step waits for them and no timeout or retry follows them.
    progress: tuple[VerifyRequest, ...] = ()


class OwnerError(Exception):
    """A state the owner cannot have reached by its own rules (a hand-made or corrupt table row)."""


# -- inputs -----------------------------------------------------------------------------------------------


def on_start(
    state: OwnerState,
    command: StartEpisode,
    task: TaskInfo | None,
    *,
    origin: Origin,
    now_us: int,
    sampling: SamplingParams | None = None,
    grading: StepGrading = NO_STEP_GRADING,
) -> Effects:
    """EpisodeStarted and the first PolicyRequest; EpisodeFailed(invalid_task) for an unknown task. With
    step `grading` on, also a progress request for the untouched workspace."""
    episode = state.episode
    if episode.phase is not Phase.NEW:
        return Effects(state, rejected=Rejection.DUPLICATE)  # never a second EpisodeStarted
    if episode.episode_id and episode.episode_id != command.episode_id:
        return Effects(state, rejected=Rejection.UNKNOWN_EPISODE)
    if task is None or (task.task_id, task.task_version) != (command.task_id, command.task_version):
        return _refuse_task(state, command, task, origin, now_us)
    meta = _command_meta(origin, command, now_us, episode.head_hash, task.initial_snapshot_id)
    started = EpisodeStarted(
        meta, command.meta.event_id, command.config, command.image, command.group_id, command.seed
    )
    seeded = sampling if sampling is not None else SamplingParams(seed=command.seed)
    draft = _append(Effects(dataclasses.replace(state, task=task, sampling=seeded)), started)
    draft = _progress(draft, grading, changed=True, origin=origin, now_us=now_us)
    return _next_action(draft, origin, now_us)


def on_action(state: OwnerState, answer: ActionProposed, *, origin: Origin, now_us: int) -> Effects:
    """Append the policy's action; then execute it in the sandbox, or grade the workspace on submit.

    An invalid reply is answered here: its StepExecuted is appended at once, no sandbox is involved."""
    draft = _accept(state, RequestKind.POLICY, answer)
    if draft.rejected is not None:
        return draft
    if isinstance(answer.action, InvalidReply):
        return _next_action(
            _append(draft, _invalid_reply_result(draft.state, origin, now_us)), origin, now_us
        )
    kind = RequestKind.VERIFY if isinstance(answer.action, Submit) else RequestKind.SANDBOX
    return _issue(draft, kind, 1, origin, now_us)


INVALID_REPLY_EXIT = 2  # what a shell reports for a usage error: the "command" could not be run at all


def _invalid_reply_result(state: OwnerState, origin: Origin, now_us: int) -> StepExecuted:
    """The observation of an invalid reply: exit code 2, the error for the model on stderr, nothing run.

    The snapshot stays the episode's restore point (nothing changed in the workspace)."""
    episode = state.episode
    pending = episode.pending_action
    if pending is None or not isinstance(pending.action, InvalidReply):
        raise OwnerError(f"episode {episode.episode_id}: no invalid reply is pending")
    limit = step_output_limit(state)
    error = pending.action.error.encode("utf-8")
    return StepExecuted(
        _meta(origin, episode, now_us),
        INVALID_REPLY_EXIT,
        Output.capture(b"", limit),
        Output.capture(error, limit),
        timed_out=False,
        duration_us=0,
    )


def on_executed(
    state: OwnerState,
    answer: StepExecuted,
    *,
    origin: Origin,
    now_us: int,
    grading: StepGrading = NO_STEP_GRADING,
) -> Effects:
    """Append the step's result, each stream fitted to the step's inline limit (`schemas.budget`); then ask
    the policy for the next step (or grade at the step or size limit). With step `grading` on, also a
    progress request for the workspace the step left, when the grading mode selects it."""
    if state.episode.started is not None and check_answer(state, RequestKind.SANDBOX, answer) is None:
        limit = step_output_limit(state)
        answer = dataclasses.replace(
            answer, stdout=fit_output(answer.stdout, limit), stderr=fit_output(answer.stderr, limit)
        )
    draft = _accept(state, RequestKind.SANDBOX, answer)
    if draft.rejected is not None:
        return draft
    changed = draft.state.episode.snapshot_id != state.episode.snapshot_id
    draft = _progress(draft, grading, changed=changed, origin=origin, now_us=now_us)
    return _next_action(draft, origin, now_us)


def _progress(draft: Effects, grading: StepGrading, *, changed: bool, origin: Origin, now_us: int) -> Effects:
    """A progress request for the workspace as it is now, if `grading` wants it: its header names how many
    steps have executed (`meta.step`) and the workspace (`meta.snapshot_id`, the restore point)."""
    state = draft.state
    episode = state.episode
    if episode.snapshot_id is None or not grading.wants(episode.step, changed):
        return draft
    request = _verify_request(state, _meta(origin, episode, now_us), steps_used=episode.step)
    return dataclasses.replace(draft, progress=(*draft.progress, request))


def on_reward(state: OwnerState, answer: RewardAssigned, *, origin: Origin, now_us: int) -> Effects:
    """Append the grade (its lists capped, `schemas.budget.fit_reward`), complete the episode and hand the
    whole trajectory to the learner."""
    draft = _accept(state, RequestKind.VERIFY, fit_reward(answer))
    if draft.rejected is not None:
        return draft
    return _end_graded(draft, origin, now_us)


def _end_graded(draft: Effects, origin: Origin, now_us: int) -> Effects:
    """After the RewardAssigned: EpisodeCompleted and the trajectory for the learner; or, when the verifier
    could not grade (verdict `error`, which no learner may train on), EpisodeFailed(verifier_error) and
    the trajectory on `trajectories.failed`. The RewardAssigned stays in the log: its report says why."""
    episode = draft.state.episode
    started, reward = _started(episode), episode.reward
    if reward is None:
        raise OwnerError(f"episode {episode.episode_id}: rewarded without a reward")
    if reward.verdict is Verdict.ERROR:
        report = "" if reward.report is None else f"; report {reward.report.sha256}"
        reason = f"the verifier ({reward.verifier}) could not grade step {reward.meta.step}{report}"
        return _fail(draft, FailureClass.VERIFIER_ERROR, reason, origin, now_us)
    completed = EpisodeCompleted(
        _meta(origin, episode, now_us),
        reward.reward,
        reward.verdict,
        episode.step,
        now_us - started.meta.occurred_at_us,
    )
    draft = _append(draft, completed)
    return dataclasses.replace(draft, trajectory=_completed_trajectory(draft.state, origin, now_us))


def on_sandbox_failed(state: OwnerState, answer: EpisodeFailed, *, origin: Origin, now_us: int) -> Effects:
    """A sandbox worker could not run the step: retry it as the next attempt (a crash, up to
    `max_attempts`) or fail the episode with the answer's class."""
    rejected = check_failure(state, RequestKind.SANDBOX, answer)
    if rejected is not None:
        return Effects(state, rejected=rejected)
    retry = SANDBOX_FAILURES[answer.failure]
    attempt = answer.meta.attempt
    if retry and attempt < _config(state).max_attempts:
        return _issue(Effects(state), RequestKind.SANDBOX, attempt + 1, origin, now_us)
    reason = f"step {answer.meta.step} attempt {attempt}: {answer.reason}"
    return _fail(Effects(state), answer.failure, reason, origin, now_us)


def on_tick(state: OwnerState, *, origin: Origin, now_us: int) -> Effects:
    """Re-issue the outstanding request past its deadline as the next attempt, or fail after the last."""
    out = state.outstanding
    if out is None or now_us < out.deadline_us or state.episode.is_terminal:
        return Effects(state)
    if out.attempt < _config(state).max_attempts:
        return _issue(Effects(state), out.kind, out.attempt + 1, origin, now_us)
    reason = f"no answer to the {out.kind.value} request of step {out.step} after {out.attempt} attempts"
    return _fail(Effects(state), _TIMEOUT_FAILURE[out.kind], reason, origin, now_us)


def on_abort(state: OwnerState, command: AbortEpisode, *, origin: Origin, now_us: int) -> Effects:
    """EpisodeFailed(aborted) unless the episode has ended (or never started)."""
    started = state.episode.started
    if started is None or (started.meta.episode_id, started.meta.run_id) != (
        command.episode_id,
        command.run_id,
    ):
        return Effects(state, rejected=Rejection.UNKNOWN_EPISODE)
    if state.episode.is_terminal:
        return Effects(state, rejected=Rejection.ENDED)
    return _fail(Effects(state), FailureClass.ABORTED, command.reason or "aborted", origin, now_us)


def outstanding_request(state: OwnerState, *, origin: Origin, now_us: int) -> Request | None:
    """The outstanding request again, with the same idempotency key (step, attempt) and chain head: what a
    worker that took over the partition sends after a crash. The deadline stays as recorded."""
    out = state.outstanding
    if out is None or state.episode.is_terminal:
        return None
    return _request(state, out.kind, out.attempt, origin, now_us)


# -- checking answers ---------------------------------------------------------------------------------------


def _of_this_episode(episode: EpisodeState, meta: EventMeta) -> bool:
    """The answer's header names this episode (started), its run and its task version."""
    started = episode.started
    return started is not None and (meta.episode_id, meta.run_id, meta.task_version) == (
        started.meta.episode_id,
        started.meta.run_id,
        started.meta.task_version,
    )


def check_answer(state: OwnerState, kind: RequestKind, answer: Answer) -> Rejection | None:
    """Why `answer` cannot be applied now, or None when it answers the outstanding request."""
    episode, meta = state.episode, answer.meta
    if not _of_this_episode(episode, meta):
        return Rejection.UNKNOWN_EPISODE
    recorded = _recorded(episode, answer)
    if recorded is not None:
        same = recorded.event_id == meta.event_id or (recorded.step, recorded.attempt) == (
            meta.step,
            meta.attempt,
        )
        return Rejection.DUPLICATE if same else Rejection.STALE_ATTEMPT
    return _check_outstanding(state, kind, meta)


def check_failure(state: OwnerState, kind: RequestKind, answer: EpisodeFailed) -> Rejection | None:
    """Why the failure answer `answer` to a `kind` request cannot be acted on now, or None."""
    episode, meta = state.episode, answer.meta
    if not _of_this_episode(episode, meta):
        return Rejection.UNKNOWN_EPISODE
    if kind is not RequestKind.SANDBOX or answer.failure not in SANDBOX_FAILURES:
        return Rejection.UNEXPECTED_FAILURE
    outcome = episode.outcome
    if isinstance(outcome, EpisodeFailed) and (outcome.failure, outcome.meta.step) == (
        answer.failure,
        meta.step,
    ):
        return Rejection.DUPLICATE  # the answer that ended the episode, delivered again
    if meta.step < episode.step and not episode.is_terminal:
        return Rejection.STALE_ATTEMPT  # another attempt of that step was executed
    return _check_outstanding(state, kind, meta)


def _check_outstanding(state: OwnerState, kind: RequestKind, meta: EventMeta) -> Rejection | None:
    if state.episode.is_terminal:
        return Rejection.ENDED
    out = state.outstanding
    if out is None or out.kind is not kind:
        return Rejection.NOT_OUTSTANDING
    if meta.step != out.step:
        return Rejection.WRONG_STEP
    if meta.attempt != out.attempt:
        return Rejection.STALE_ATTEMPT
    if meta.prev_hash != state.episode.head_hash:
        return Rejection.WRONG_CHAIN_HEAD
    return None


def _recorded(episode: EpisodeState, answer: Answer) -> EventMeta | None:
    """The header of the event already filling the slot `answer` targets, if any."""
    step = answer.meta.step
    recorded: EpisodeEvent | None = None
    if isinstance(answer, ActionProposed):
        if 0 <= step < len(episode.history):
            recorded = episode.history[step].action
        elif step == episode.step:
            recorded = episode.pending_action
    elif isinstance(answer, StepExecuted):
        if 0 <= step < len(episode.history):
            recorded = episode.history[step].result
    else:
        recorded = episode.reward
    return None if recorded is None else recorded.meta


def _accept(state: OwnerState, kind: RequestKind, answer: Answer) -> Effects:
    rejected = check_answer(state, kind, answer)
    if rejected is not None:
        return Effects(state, rejected=rejected)
    try:
        draft = _append(Effects(state), answer)
    except FoldError:
        return Effects(state, rejected=Rejection.INVALID)
    if kind is RequestKind.POLICY and len(draft.events[-1].data) > ACTION_MAX:
        return Effects(state, rejected=Rejection.OVERSIZED)
    return dataclasses.replace(draft, state=dataclasses.replace(draft.state, outstanding=None))


# -- building effects ---------------------------------------------------------------------------------------


def _append(draft: Effects, event: EpisodeEvent) -> Effects:
    """Encode, hash and fold `event`: the bytes hashed are the bytes the caller appends."""
    data = default_codec().encode(event)
    hashed = digest(data)
    episode = apply(draft.state.episode, event, hashed)
    logged = draft.state.logged_bytes + len(data)
    return dataclasses.replace(
        draft,
        state=dataclasses.replace(draft.state, episode=episode, logged_bytes=logged),
        events=(*draft.events, Appended(event, data, hashed)),
    )


def _next_action(draft: Effects, origin: Origin, now_us: int) -> Effects:
    """After a step: the next PolicyRequest, or at the step limit the grading of the truncated episode."""
    max_steps = _config(draft.state).max_steps
    if max_steps < 1:  # nothing would ever be sampled: there is no trajectory to grade
        return _fail(draft, FailureClass.STEP_LIMIT, "max_steps is 0: no step allowed", origin, now_us)
    state = draft.state
    if state.episode.phase is Phase.AWAITING_VERIFICATION or _at_step_limit(state) or _at_size_limit(state):
        return _issue(draft, RequestKind.VERIFY, 1, origin, now_us)
    return _issue(draft, RequestKind.POLICY, 1, origin, now_us)


def _at_step_limit(state: OwnerState) -> bool:
    return state.episode.step >= _config(state).max_steps


def _at_size_limit(state: OwnerState) -> bool:
    """The episode has logged its budget: one more step could push a record past the broker's limit."""
    return state.logged_bytes >= EPISODE_LOG_BUDGET


def step_output_limit(state: OwnerState) -> int:
    """Inline bytes per stream for the next step: the episode's limit within its inline budget."""
    used = inline_output_bytes(
        output for step in state.episode.history if step.result for output in _streams(step.result)
    )
    return stream_limit(_config(state).output_limit_bytes, used)


def _streams(result: StepExecuted) -> tuple[Output, Output]:
    return result.stdout, result.stderr


def _issue(draft: Effects, kind: RequestKind, attempt: int, origin: Origin, now_us: int) -> Effects:
    state = draft.state
    deadline = answer_deadline_us(now_us, _base_timeout_s(state, kind), attempt)
    out = Outstanding(kind, state.episode.step, attempt, now_us, deadline)
    request = _request(state, kind, attempt, origin, now_us)
    return dataclasses.replace(
        draft,
        state=dataclasses.replace(state, outstanding=out),
        requests=(*draft.requests, request),
    )


def _request(state: OwnerState, kind: RequestKind, attempt: int, origin: Origin, now_us: int) -> Request:
    episode, task = state.episode, _task(state)
    started, config = _started(episode), _config(state)
    meta = _meta(origin, episode, now_us, attempt)
    if kind is RequestKind.POLICY:
        return PolicyRequest(meta, task.instruction, episode.history, state.sampling)
    if kind is RequestKind.VERIFY:
        steps_used = len(episode.history) + (episode.pending_action is not None)  # a submit is an action
        return _verify_request(state, meta, steps_used)
    pending = episode.pending_action
    if pending is None or isinstance(pending.action, Submit | InvalidReply):
        raise OwnerError(f"episode {episode.episode_id}: a sandbox request needs a pending sandbox action")
    limit = step_output_limit(state)
    return SandboxRequest(meta, started.image, pending.action, config.sandbox_timeout_s, limit, task.limits)


def _verify_request(state: OwnerState, meta: EventMeta, steps_used: int) -> VerifyRequest:
    """A grade of the workspace `meta` names, in the episode's image, under the task's timeout and limits,
    with the steps used against the episode's budget (the efficiency component)."""
    task = _task(state)
    image = _started(state.episode).image
    return VerifyRequest(meta, image, task.timeout_s, task.limits, steps_used, _config(state).max_steps)


def _base_timeout_s(state: OwnerState, kind: RequestKind) -> float:
    config = _config(state)
    if kind is RequestKind.POLICY:
        return config.policy_timeout_s
    if kind is RequestKind.SANDBOX:
        return config.sandbox_timeout_s  # also the step's own wall limit, enforced by the sandbox
    # Never give up on the verifier before its own limit (the task's test timeout) has passed.
    return max(config.verify_timeout_s, _task(state).timeout_s)


def _fail(draft: Effects, failure: FailureClass, reason: str, origin: Origin, now_us: int) -> Effects:
    episode = draft.state.episode
    event = EpisodeFailed(_meta(origin, episode, now_us), failure, reason, failure in _RETRYABLE)
    draft = _append(draft, event)
    ended = draft.state.episode
    trajectory = TrajectoryFailed(_meta(origin, ended, now_us), failure, reason, ended.steps)
    state = dataclasses.replace(draft.state, outstanding=None)
    return dataclasses.replace(draft, state=state, trajectory=trajectory)


def _refuse_task(
    state: OwnerState, command: StartEpisode, task: TaskInfo | None, origin: Origin, now_us: int
) -> Effects:
    if task is None:
        reason = f"unknown task {command.task_id}"
    else:
        reason = (
            f"task {command.task_id} is at version {task.task_version[:12]}, not {command.task_version[:12]}"
        )
    head = state.episode.head_hash
    event = EpisodeFailed(
        _command_meta(origin, command, now_us, head, None), FailureClass.INVALID_TASK, reason
    )
    draft = _append(Effects(state), event)
    meta = _command_meta(origin, command, now_us, draft.state.episode.head_hash, None)
    return dataclasses.replace(
        draft, trajectory=TrajectoryFailed(meta, FailureClass.INVALID_TASK, reason, ())
    )


def _completed_trajectory(state: OwnerState, origin: Origin, now_us: int) -> TrajectoryCompleted:
    episode = state.episode
    started, reward = _started(episode), episode.reward
    if reward is None:
        raise OwnerError(f"episode {episode.episode_id}: completed without a reward")
    steps = episode.steps
    versions = [step.action.meta.policy_version for step in steps] or [started.meta.policy_version]
    return TrajectoryCompleted(
        _meta(origin, episode, now_us),  # prev_hash: the digest of EpisodeCompleted, the chain head
        started.group_id,
        _task(state).instruction,
        steps,
        reward.reward,
        reward.verdict,
        reward.passed,
        reward.total,
        min(versions),
        max(versions),
        reward.versions,  # what a quarantine rule matches, and the grader canaries must vouch for
        reward.meta.occurred_at_us,
    )


# -- headers and lookups -----------------------------------------------------------------------------------


def _meta(origin: Origin, episode: EpisodeState, now_us: int, attempt: int = 1) -> EventMeta:
    """A header at the episode's current step, linked to its chain head, restore point as snapshot."""
    first = _started(episode).meta
    meta = origin.event_meta(
        run_id=first.run_id,
        episode_id=first.episode_id,
        task_id=first.task_id,
        task_version=first.task_version,
        step=episode.step,
        attempt=attempt,
        policy_version=first.policy_version,
        prev_hash=episode.head_hash,
        snapshot_id=episode.snapshot_id,
    )
    return dataclasses.replace(meta, occurred_at_us=now_us)


def _command_meta(
    origin: Origin, command: StartEpisode, now_us: int, prev_hash: str, snapshot_id: str | None
) -> EventMeta:
    meta = origin.event_meta(
        run_id=command.run_id,
        episode_id=command.episode_id,
        task_id=command.task_id,
        task_version=command.task_version,
        step=0,
        attempt=1,
        policy_version=command.policy_version,
        prev_hash=prev_hash,
        snapshot_id=snapshot_id,
        traceparent=command.meta.traceparent,
    )
    return dataclasses.replace(meta, occurred_at_us=now_us)


def _started(episode: EpisodeState) -> EpisodeStarted:
    if episode.started is None:
        raise OwnerError(f"episode {episode.episode_id} has not started")
    return episode.started


def _config(state: OwnerState) -> EpisodeConfig:
    return _started(state.episode).config


def _task(state: OwnerState) -> TaskInfo:
    if state.task is None:
        raise OwnerError(f"episode {state.episode.episode_id} has no task")
    return state.task


# -- resuming after a rebuild ----------------------------------------------------------------------------
# The functions above say what to do after an input; `resume` says what is due for a state alone, the
# way the owner would have continued when the table missed its last write and the state was rebuilt from
# `episode.events`: the request its phase waits for (attempt 1: what the lost input issued, so its
# idempotency key repeats), the EpisodeCompleted after a reward, or the trajectory of an ended episode
# (it may have been published already: the learner keys trajectories by episode and drops repeats).


def resume(state: OwnerState, *, origin: Origin, now_us: int) -> Effects:
    """The effects due for `state`; its `outstanding` is recomputed (the lost write held it)."""
    draft = Effects(dataclasses.replace(state, outstanding=None))
    episode = state.episode
    phase = episode.phase
    if phase is Phase.AWAITING_ACTION:
        return _next_action(draft, origin, now_us)
    if phase is Phase.AWAITING_EXECUTION:
        pending = episode.pending_action
        if pending is not None and isinstance(pending.action, InvalidReply):
            answered = _append(draft, _invalid_reply_result(draft.state, origin, now_us))
            return _next_action(answered, origin, now_us)
        return _issue(draft, RequestKind.SANDBOX, 1, origin, now_us)
    if phase is Phase.AWAITING_VERIFICATION:
        return _issue(draft, RequestKind.VERIFY, 1, origin, now_us)
    if phase is Phase.REWARDED:
        return _end_graded(draft, origin, now_us)
    if phase is Phase.COMPLETED:
        return dataclasses.replace(draft, trajectory=_completed_trajectory(state, origin, now_us))
    if phase is Phase.FAILED and isinstance(episode.outcome, EpisodeFailed) and episode.started is not None:
        failed = episode.outcome
        meta = _meta(origin, episode, now_us)
        lost = TrajectoryFailed(meta, failed.failure, failed.reason, episode.steps)
        return dataclasses.replace(draft, trajectory=lost)
    return draft
