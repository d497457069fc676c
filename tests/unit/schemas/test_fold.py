"""Episode state as a pure fold: order, duplicates, conflicts, the chain link and snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from schemas.actions import Action, ApplyPatch, RunCommand, Submit, WriteFile
from schemas.chain import digest
from schemas.codec import Codec, default_codec
from schemas.common import FailureClass, Output, Verdict
from schemas.events import EpisodeEvent, StepExecuted
from schemas.fold import BrokenChain, ConflictingEvent, FoldError, OutOfOrder, WrongEpisode, apply, fold
from schemas.replay import replay
from schemas.state import EpisodeState, Phase
from schemas.testing import EpisodeScript

PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOOLS: list[Action] = [RunCommand("pytest -q"), WriteFile("a.py", b"x = 1\n"), ApplyPatch("--- a")]
ENDINGS = ["awaiting_action", "awaiting_execution", "submitted", "rewarded", "completed", "failed"]


@st.composite
def episodes(draw: st.DrawFn) -> EpisodeScript:
    """A well-formed episode of 0-4 executed steps, stopped at any phase."""
    script = EpisodeScript(default_codec())
    script.start()
    attempts = st.integers(1, 3)
    for _ in range(draw(st.integers(0, 4))):
        action = draw(st.sampled_from(TOOLS))
        script.act(action, attempt=draw(attempts))
        script.execute(exit_code=draw(st.integers(0, 2)), stdout=b"out\n", attempt=draw(attempts))
    ending = draw(st.sampled_from(ENDINGS))
    if ending == "awaiting_execution":
        script.act(RunCommand("make"), attempt=draw(attempts))
    if ending in ("submitted", "rewarded", "completed"):
        script.act(Submit("done"), attempt=draw(attempts))
    if ending in ("rewarded", "completed"):
        script.reward(0.8, Verdict.PARTIAL, 4, 5, ("t5",), attempt=draw(attempts))
    if ending == "completed":
        script.complete()
    if ending == "failed":
        script.fail(draw(st.sampled_from(FailureClass)), "stopped")
    return script


@st.composite
def deliveries(draw: st.DrawFn, length: int) -> list[int]:
    """At-least-once delivery within a partition: every record in order, each possibly followed by
    redeliveries of any record already delivered (its own or earlier ones)."""
    order: list[int] = []
    for index in range(length):
        order.append(index)
        order += draw(st.lists(st.integers(0, index), max_size=2))
    return order


@PROPERTY
@given(script=episodes(), data=st.data())
def test_duplicates_anywhere_after_the_original_change_nothing(
    script: EpisodeScript, data: st.DataObject
) -> None:
    entries = script.entries
    order = data.draw(deliveries(len(entries)))
    assert fold([entries[i] for i in order]) == fold(entries)
    records = script.records
    assert replay([records[i] for i in order], default_codec()) == fold(entries)


@PROPERTY
@given(script=episodes(), data=st.data())
def test_any_reordering_of_distinct_events_is_refused(script: EpisodeScript, data: st.DataObject) -> None:
    entries = script.entries
    assume(len(entries) >= 2)
    i = data.draw(st.integers(0, len(entries) - 2))
    j = data.draw(st.integers(i + 1, len(entries) - 1))
    swapped = list(entries)
    swapped[i], swapped[j] = swapped[j], swapped[i]
    with pytest.raises(FoldError) as err:
        fold(swapped)
    assert err.value.index == i


@PROPERTY
@given(script=episodes(), data=st.data())
def test_a_missing_event_is_refused_where_the_gap_is(script: EpisodeScript, data: st.DataObject) -> None:
    entries = script.entries
    assume(len(entries) >= 2)
    i = data.draw(st.integers(0, len(entries) - 2))
    with pytest.raises(FoldError) as err:
        fold(entries[:i] + entries[i + 1 :])
    assert err.value.index == i


@PROPERTY
@given(script=episodes(), data=st.data())
def test_snapshot_plus_tail_equals_the_full_fold(script: EpisodeScript, data: st.DataObject) -> None:
    codec = default_codec()
    entries = script.entries
    k = data.draw(st.integers(0, len(entries)))
    snapshot = codec.encode(fold(entries[:k]))
    restored = codec.decode_as(snapshot, EpisodeState)
    assert fold(entries[k:], restored) == fold(entries)


@pytest.fixture
def script(codec: Codec) -> EpisodeScript:
    return EpisodeScript(codec)


def test_state_exposes_what_the_owner_needs_next(script: EpisodeScript) -> None:
    script.start()
    state = fold(script.entries)
    assert (state.phase, state.step, state.snapshot_id, state.history) == (Phase.AWAITING_ACTION, 0, None, ())
    assert state.head_hash == digest(script.records[-1])

    script.act(RunCommand("ls"), attempt=2)
    state = fold(script.entries)
    assert (state.phase, state.attempt, state.step) == (Phase.AWAITING_EXECUTION, 2, 0)
    assert state.pending_action == script.events[-1]

    executed = script.execute(stdout=b"a.py\n")
    state = fold(script.entries)
    assert (state.phase, state.step, state.snapshot_id) == (
        Phase.AWAITING_ACTION,
        1,
        executed.meta.snapshot_id,
    )
    assert [r.result for r in state.history] == [executed] and state.pending_action is None

    script.act(Submit())
    assert fold(script.entries).phase is Phase.AWAITING_VERIFICATION
    script.reward(-1.0, Verdict.TAMPERED, 0, 3, tampered_paths=("tests/test_a.py",))
    rewarded = fold(script.entries)
    assert rewarded.phase is Phase.REWARDED and rewarded.reward is not None
    script.complete()
    done = fold(script.entries)
    assert done.phase is Phase.COMPLETED and done.is_terminal
    assert done.events_applied == 6 and done.updated_at_us == script.events[-1].meta.occurred_at_us
    assert [type(r.action.action) for r in done.steps] == [RunCommand, Submit]


def test_same_event_id_or_same_step_attempt_kind_is_a_duplicate(script: EpisodeScript) -> None:
    script.start()
    proposed = script.act(RunCommand("ls"))
    state = fold(script.entries)
    retried_answer = replace(
        proposed, meta=replace(proposed.meta, event_id="another-id"), action=RunCommand("pwd")
    )
    assert apply(state, retried_answer, "f" * 64) is state
    same_id = replace(proposed, meta=replace(proposed.meta, attempt=3))
    assert apply(state, same_id, "e" * 64) is state


def test_a_different_answer_for_a_filled_slot_conflicts(script: EpisodeScript) -> None:
    script.start()
    proposed = script.act(RunCommand("ls"))
    script.execute()
    state = fold(script.entries)
    late = replace(proposed, meta=replace(proposed.meta, event_id="late", attempt=2))
    with pytest.raises(ConflictingEvent, match="conflicts with the recorded ActionProposed"):
        apply(state, late, "0" * 64)


@pytest.mark.parametrize("what", ["execute_before_action", "skip_a_step", "after_end", "execute_submit"])
def test_events_out_of_order_raise(script: EpisodeScript, what: str) -> None:
    script.start()
    if what == "execute_before_action":
        event: EpisodeEvent = StepExecuted(script.meta("sandbox"), 0, *_outputs(), False, 1)
    elif what == "skip_a_step":
        script.step = 1  # the script lies about the step: an ActionProposed for step 1 while at step 0
        event = script.act(RunCommand("ls"))
        script.log.pop()
    elif what == "after_end":
        script.fail(FailureClass.ABORTED, "stop")
        event = script.act(RunCommand("ls"))
        script.log.pop()
    else:
        script.act(Submit())
        event = StepExecuted(script.meta("sandbox"), 0, *_outputs(), False, 1)
    with pytest.raises(OutOfOrder):
        fold([*script.entries, (event, "0" * 64)])


def _outputs() -> tuple[Output, Output]:
    return Output(""), Output("")


def test_the_next_event_must_link_to_the_chain_head(script: EpisodeScript) -> None:
    script.start()
    state = fold(script.entries)
    proposed = script.act(RunCommand("ls"))
    forged = replace(proposed, meta=replace(proposed.meta, prev_hash="1" * 64))
    with pytest.raises(BrokenChain):
        apply(state, forged, "2" * 64)


def test_attempts_count_from_one(script: EpisodeScript) -> None:
    script.start()
    state = fold(script.entries)
    proposed = script.act(RunCommand("ls"), attempt=0)
    with pytest.raises(OutOfOrder, match="attempts count from 1"):
        apply(state, proposed, "0" * 64)


def test_events_of_another_episode_are_refused(codec: Codec, script: EpisodeScript) -> None:
    script.start()
    other = EpisodeScript(codec, episode_id="ep-other")
    other.start()
    with pytest.raises(WrongEpisode):
        fold([*script.entries, other.entries[0]])
    with pytest.raises(WrongEpisode):
        apply(EpisodeState.new("ep-9"), other.events[0], "0" * 64)


def test_an_episode_can_fail_before_it_starts(script: EpisodeScript) -> None:
    failed = script.fail(FailureClass.INVALID_TASK, "task folder has no tests/")
    state = fold(script.entries)
    assert (state.phase, state.outcome, state.episode_id) == (Phase.FAILED, failed, script.episode_id)


def test_fold_errors_name_the_position(script: EpisodeScript) -> None:
    script.start()
    script.act(RunCommand("ls"))
    entries = script.entries
    with pytest.raises(FoldError, match=r"^event #2: ") as err:
        fold([*entries, (_bad_step(script), "0" * 64)])
    assert err.value.index == 2 and err.value.code == "out_of_order"


def _bad_step(script: EpisodeScript) -> StepExecuted:
    script.step = 5
    return StepExecuted(script.meta("sandbox"), 0, *_outputs(), False, 1)


def test_a_grade_after_an_executed_step_is_the_owners_size_truncation_and_folds(codec: Codec) -> None:
    """The owner stops asking for actions once the episode logged its byte budget (`schemas.budget`): the
    RewardAssigned then follows a StepExecuted in phase awaiting_action, before the step limit."""
    script = EpisodeScript(codec)
    script.start()
    script.act(RunCommand("ls"))
    script.execute(stdout=b"x\n")
    assert fold(script.entries).phase is Phase.AWAITING_ACTION
    script.reward()
    script.complete()
    assert fold(script.entries).phase is Phase.COMPLETED


def test_a_grade_before_any_executed_step_is_still_out_of_order(codec: Codec) -> None:
    script = EpisodeScript(codec)
    script.start()
    script.reward()
    with pytest.raises(OutOfOrder):
        fold(script.entries)
