"""Episode state as a pure fold: `apply(state, event, digest) -> state`, used live and in replay.

The one place where the order of an episode is enforced and where duplicates are recognised:

* Steps are gapless. Each event fills the next *slot* of the episode: EpisodeStarted, then per step
  ActionProposed and (unless the action is submit) StepExecuted, then RewardAssigned and EpisodeCompleted;
  EpisodeFailed may fill the next slot at any point before the end. An InvalidReply action (a reply that
  was no tool call) is a step like any other: its StepExecuted is the owner's, not a sandbox's.
* Truncation: the StepExecuted of step `config.max_steps - 1` ends the acting. The workspace is graded as
  it is (phase awaiting_verification, as after a submit), so RewardAssigned follows without a Submit.
  The owner also truncates by size (`schemas.budget.EPISODE_LOG_BUDGET` of logged bytes): then the
  RewardAssigned follows a StepExecuted in phase awaiting_action, which the fold accepts after any
  executed step (the sizes are the log's, not the state's).
* An event for a slot already filled is a duplicate when it has the same event id, or the same
  step and attempt (same episode and kind by construction of the slot); it is ignored and the state is
  returned unchanged, so at-least-once delivery is harmless. A *different* event for a filled slot is a
  conflict and raises.
* An event for a slot that is not the next one (a gap, the wrong phase, after the end) raises.
* An accepted event must link to the chain: its prev_hash is the digest of the last accepted event.

`digest` is the sha256 of the event's bytes as written to the log (`schemas.chain.digest`): the chain is
over exact bytes, which a decoded (possibly upcast) event can no longer reproduce, so callers pass it in.
No clock, randomness or id generation happens here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from schemas.actions import Submit
from schemas.common import EventMeta
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeEvent,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
    StepRecord,
)
from schemas.state import EpisodeState, Phase


class FoldError(Exception):
    """An event that cannot follow the state. `code` is stable (dead-letter reason); `index` is the event's
    position in the sequence being folded, when known."""

    code: ClassVar[str] = "invalid_event"

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message if index is None else f"event #{index}: {message}")
        self.message = message
        self.index = index

    def at(self, index: int) -> FoldError:
        return type(self)(self.message, index)


class WrongEpisode(FoldError):
    code = "wrong_episode"


class OutOfOrder(FoldError):
    code = "out_of_order"


class ConflictingEvent(FoldError):
    code = "conflicting_event"


class BrokenChain(FoldError):
    code = "broken_chain"


def _describe(event: EpisodeEvent) -> str:
    meta = event.meta
    return f"{type(event).__name__}(step={meta.step}, attempt={meta.attempt}, id={meta.event_id})"


def _check_identity(state: EpisodeState, meta: EventMeta) -> None:
    started = state.started
    if started is not None:
        first = started.meta
        if (meta.episode_id, meta.run_id, meta.task_version) != (
            first.episode_id,
            first.run_id,
            first.task_version,
        ):
            raise WrongEpisode(
                f"event of episode {meta.episode_id} (run {meta.run_id}, task {meta.task_version[:12]}) "
                f"applied to episode {first.episode_id} (run {first.run_id}, task {first.task_version[:12]})"
            )
    elif state.episode_id and meta.episode_id != state.episode_id:
        raise WrongEpisode(f"event of episode {meta.episode_id} applied to episode {state.episode_id}")


def _duplicate_or_conflict(state: EpisodeState, prior: EpisodeEvent, event: EpisodeEvent) -> EpisodeState:
    """`event` targets a slot that `prior` already fills: ignore an exact duplicate, refuse anything else."""
    p, e = prior.meta, event.meta
    if p.event_id == e.event_id or (p.step == e.step and p.attempt == e.attempt):
        return state
    raise ConflictingEvent(f"{_describe(event)} conflicts with the recorded {_describe(prior)}")


def _expect_next(state: EpisodeState, event: EpisodeEvent, *phases: Phase) -> None:
    """`event` must fill the next slot: right phase, current step, a valid attempt and a chain link."""
    meta = event.meta
    if state.phase not in phases:
        wanted = " or ".join(p.value for p in phases)
        raise OutOfOrder(f"{_describe(event)} needs phase {wanted}, the episode is {state.phase.value}")
    if meta.step != state.step:
        raise OutOfOrder(f"{_describe(event)} is not for the current step {state.step} (steps are gapless)")
    if meta.attempt < 1:
        raise OutOfOrder(f"{_describe(event)} has attempt {meta.attempt}; attempts count from 1")
    if meta.prev_hash != state.head_hash:
        raise BrokenChain(
            f"{_describe(event)} links to {meta.prev_hash[:16]}..., "
            f"the chain head is {state.head_hash[:16]}..."
        )


def _on_started(state: EpisodeState, event: EpisodeStarted, digest: str) -> EpisodeState:
    if state.started is not None:
        return _duplicate_or_conflict(state, state.started, event)
    _expect_next(state, event, Phase.NEW)
    meta = event.meta
    return EpisodeState(
        meta.episode_id,
        Phase.AWAITING_ACTION,
        0,
        meta.attempt,
        meta.snapshot_id,
        digest,
        state.events_applied + 1,
        meta.occurred_at_us,
        event,
    )


def _on_action(state: EpisodeState, event: ActionProposed, digest: str) -> EpisodeState:
    step = event.meta.step
    if 0 <= step < state.step:
        return _duplicate_or_conflict(state, state.history[step].action, event)
    if step == state.step and state.pending_action is not None:
        return _duplicate_or_conflict(state, state.pending_action, event)
    _expect_next(state, event, Phase.AWAITING_ACTION)
    meta = event.meta
    phase = Phase.AWAITING_VERIFICATION if isinstance(event.action, Submit) else Phase.AWAITING_EXECUTION
    return EpisodeState(
        state.episode_id,
        phase,
        state.step,
        meta.attempt,
        state.snapshot_id,
        digest,
        state.events_applied + 1,
        meta.occurred_at_us,
        state.started,
        state.history,
        event,
    )


def _on_executed(state: EpisodeState, event: StepExecuted, digest: str) -> EpisodeState:
    step = event.meta.step
    if 0 <= step < state.step:
        prior = state.history[step].result
        if prior is not None:
            return _duplicate_or_conflict(state, prior, event)
    _expect_next(state, event, Phase.AWAITING_EXECUTION)
    action = state.pending_action
    if action is None:  # only a hand-made snapshot can be awaiting execution of nothing
        raise OutOfOrder(f"{_describe(event)}: no action is pending")
    meta = event.meta
    truncated = state.started is not None and state.step + 1 >= state.started.config.max_steps
    return EpisodeState(
        state.episode_id,
        Phase.AWAITING_VERIFICATION if truncated else Phase.AWAITING_ACTION,
        state.step + 1,
        meta.attempt,
        meta.snapshot_id,
        digest,
        state.events_applied + 1,
        meta.occurred_at_us,
        state.started,
        (*state.history, StepRecord(action, event)),
    )


def _on_reward(state: EpisodeState, event: RewardAssigned, digest: str) -> EpisodeState:
    if state.reward is not None:
        return _duplicate_or_conflict(state, state.reward, event)
    if state.phase is Phase.AWAITING_ACTION and (_at_step_limit(state) or state.history):
        # A snapshot written before truncation was graded still says awaiting_action at the limit; and the
        # owner truncates an episode by size (`schemas.budget`) after any executed step: the byte count it
        # decides on is the log's, not the state's, so the fold accepts the grade and audit rechecks it.
        _expect_next(state, event, Phase.AWAITING_ACTION)
    else:
        _expect_next(state, event, Phase.AWAITING_VERIFICATION)
    meta = event.meta
    return EpisodeState(
        state.episode_id,
        Phase.REWARDED,
        state.step,
        meta.attempt,
        state.snapshot_id,
        digest,
        state.events_applied + 1,
        meta.occurred_at_us,
        state.started,
        state.history,
        state.pending_action,
        event,
    )


def _at_step_limit(state: EpisodeState) -> bool:
    return state.started is not None and state.step >= state.started.config.max_steps


def _ended(
    state: EpisodeState, event: EpisodeCompleted | EpisodeFailed, digest: str, phase: Phase
) -> EpisodeState:
    meta = event.meta
    return EpisodeState(
        state.episode_id or meta.episode_id,
        phase,
        state.step,
        meta.attempt,
        state.snapshot_id,
        digest,
        state.events_applied + 1,
        meta.occurred_at_us,
        state.started,
        state.history,
        state.pending_action,
        state.reward,
        event,
    )


def _on_completed(state: EpisodeState, event: EpisodeCompleted, digest: str) -> EpisodeState:
    if isinstance(state.outcome, EpisodeCompleted):
        return _duplicate_or_conflict(state, state.outcome, event)
    _expect_next(state, event, Phase.REWARDED)
    return _ended(state, event, digest, Phase.COMPLETED)


_NOT_ENDED = (
    Phase.NEW,
    Phase.AWAITING_ACTION,
    Phase.AWAITING_EXECUTION,
    Phase.AWAITING_VERIFICATION,
    Phase.REWARDED,
)


def _on_failed(state: EpisodeState, event: EpisodeFailed, digest: str) -> EpisodeState:
    if isinstance(state.outcome, EpisodeFailed):
        return _duplicate_or_conflict(state, state.outcome, event)
    _expect_next(state, event, *_NOT_ENDED)  # a task can be refused before it starts (invalid_task)
    return _ended(state, event, digest, Phase.FAILED)


_Handler = Callable[[EpisodeState, Any, str], EpisodeState]
_HANDLERS: dict[type, _Handler] = {
    EpisodeStarted: _on_started,
    ActionProposed: _on_action,
    StepExecuted: _on_executed,
    RewardAssigned: _on_reward,
    EpisodeCompleted: _on_completed,
    EpisodeFailed: _on_failed,
}


def apply(state: EpisodeState, event: EpisodeEvent, digest: str) -> EpisodeState:
    """The state after `event` (whose logged bytes hash to `digest`); `state` itself for a duplicate."""
    handler = _HANDLERS.get(type(event))
    if handler is None:
        raise TypeError(f"{type(event).__name__} is not an episode event")
    _check_identity(state, event.meta)
    return handler(state, event, digest)


def fold(entries: Iterable[tuple[EpisodeEvent, str]], state: EpisodeState | None = None) -> EpisodeState:
    """Apply (event, digest) pairs in order, from `state` or from the empty state. Errors carry the index."""
    current = EpisodeState() if state is None else state
    for index, (event, digest) in enumerate(entries):
        try:
            current = apply(current, event, digest)
        except FoldError as err:
            raise err.at(index) from err
    return current
