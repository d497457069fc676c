"""Schema evolution: bytes written with an old version are read by today's code (resolution + upcasters)."""

from __future__ import annotations

import dataclasses
from io import BytesIO
from typing import Any

import pytest
from fastavro import schemaless_writer

from schemas.actions import INVALID_REPLY_CHARS, InvalidReply, RunCommand, Submit
from schemas.catalog import SchemaCatalog, SchemaVersion, compile_version, expand
from schemas.codec import MAGIC, Codec, DecodeError, DecodeReason
from schemas.common import FailureClass, Verdict
from schemas.events import ActionProposed, RewardAssigned, StepExecuted
from schemas.fold import fold
from schemas.requests import PolicyRequest, SamplingParams
from schemas.state import EpisodeState
from schemas.testing import EpisodeScript
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from schemas.upcasters import SIGKILL_EXIT, upcast_chain
from schemas.versions import GradeVersions


def write_with(sv: SchemaVersion, record: dict[str, Any]) -> bytes:
    """Single-object bytes as a producer built against `sv` wrote them."""
    out = BytesIO()
    out.write(MAGIC + sv.fingerprint)
    schemaless_writer(out, sv.parsed, record)
    return out.getvalue()


def v1_step_record(codec: Codec, exit_code: int, timed_out: bool) -> dict[str, Any]:
    """A StepExecuted as a v1 sandbox agent built it: no oom_killed, no trace context."""
    script = EpisodeScript(codec)
    script.start()
    record = script.execute(exit_code=exit_code, timed_out=timed_out, stdout=b"Killed\n").to_record()
    del record["oom_killed"]
    del record["meta"]["traceparent"]
    return record


@pytest.mark.parametrize(
    ("exit_code", "timed_out", "oom_killed"),
    [(SIGKILL_EXIT, False, True), (SIGKILL_EXIT, True, False), (0, False, False), (1, False, False)],
)
def test_v1_step_executed_is_read_by_todays_code(
    codec: Codec, exit_code: int, timed_out: bool, oom_killed: bool
) -> None:
    v1 = codec.catalog.version(StepExecuted.SCHEMA, 1)
    data = write_with(v1, v1_step_record(codec, exit_code, timed_out))
    assert codec.schema_of(data) == (StepExecuted.SCHEMA, 1)
    event = codec.decode_as(data, StepExecuted)
    assert event.exit_code == exit_code and event.timed_out is timed_out
    assert event.oom_killed is oom_killed  # the upcaster, not the schema default, decided
    assert event.meta.traceparent is None  # plain Avro resolution: the field's default
    assert event.stdout.text == "Killed\n"


def test_v1_bytes_re_encode_as_the_current_version(codec: Codec) -> None:
    v1 = codec.catalog.version(StepExecuted.SCHEMA, 1)
    event = codec.decode(write_with(v1, v1_step_record(codec, 0, False)))
    assert codec.schema_of(codec.encode(event)) == (StepExecuted.SCHEMA, 2)


def test_an_old_reader_refuses_bytes_of_a_version_it_does_not_know(codec: Codec) -> None:
    old_catalog = SchemaCatalog([sv for sv in codec.catalog.all_versions() if sv.version == 1])
    old_reader = Codec(old_catalog, types=[])
    script = EpisodeScript(codec)
    script.start()
    with pytest.raises(DecodeError) as err:
        old_reader.decode_record(codec.encode(script.execute()))
    assert err.value.reason is DecodeReason.UNKNOWN_FINGERPRINT


# A synthetic record with three versions, to show resolution and a chain of upcasters at work.
def _thing(version: int) -> SchemaVersion:
    fields: list[dict[str, Any]] = [{"name": "celsius", "type": "double", "doc": "temperature"}]
    if version >= 2:  # v2 adds a unit, default "C"; v1 files were sometimes written in Fahrenheit
        fields.append({"name": "unit", "type": "string", "default": "C", "doc": "unit"})
    if version >= 3:  # v3 adds a source, and fixes every reading to Celsius
        fields.append({"name": "source", "type": "string", "default": "", "doc": "source"})
    schema = {
        "type": "record",
        "name": "Thing",
        "namespace": "t",
        "doc": "d",
        "version": version,
        "fields": fields,
    }
    return compile_version("t.Thing", version, expand("t.Thing", {"t.Thing": schema}))


def _v1_to_v2(rec: dict[str, Any]) -> dict[str, Any]:
    rec["unit"] = "F" if rec["celsius"] > 60 else "C"  # no v1 reading in Celsius was ever that hot
    return rec


def _v2_to_v3(rec: dict[str, Any]) -> dict[str, Any]:
    if rec["unit"] == "F":
        rec["celsius"], rec["unit"] = (rec["celsius"] - 32) * 5 / 9, "C"
    rec["source"] = rec["source"] or "upcast"
    return rec


UPCASTERS = {("t.Thing", 1): _v1_to_v2, ("t.Thing", 2): _v2_to_v3}


@pytest.fixture(scope="module")
def things() -> tuple[list[SchemaVersion], Codec]:
    versions = [_thing(v) for v in (1, 2, 3)]
    return versions, Codec(SchemaCatalog(versions), types=[], upcasters=UPCASTERS)


def test_upcasters_chain_oldest_first(things: tuple[list[SchemaVersion], Codec]) -> None:
    (v1, v2, v3), codec = things
    assert upcast_chain("t.Thing", 1, 3, UPCASTERS) == (_v1_to_v2, _v2_to_v3)
    assert codec.decode_record(write_with(v1, {"celsius": 212.0})) == (
        "t.Thing",
        {"celsius": 100.0, "unit": "C", "source": "upcast"},
    )
    assert codec.decode_record(write_with(v1, {"celsius": 20.0}))[1] == {
        "celsius": 20.0,
        "unit": "C",
        "source": "upcast",
    }
    assert codec.decode_record(write_with(v2, {"celsius": 50.0, "unit": "F"}))[1]["celsius"] == 10.0
    current = {"celsius": 99.0, "unit": "F", "source": "probe"}  # today's bytes: no resolution, no upcaster
    assert codec.decode_record(write_with(v3, current))[1] == current


def test_a_failing_upcaster_is_a_decode_error(things: tuple[list[SchemaVersion], Codec]) -> None:
    (v1, _, _), _ = things
    broken = Codec(
        SchemaCatalog([_thing(1), _thing(2)]), types=[], upcasters={("t.Thing", 1): lambda r: r["nope"]}
    )
    with pytest.raises(DecodeError) as err:
        broken.decode_record(write_with(v1, {"celsius": 1.0}))
    assert err.value.reason is DecodeReason.UPCAST_FAILED


def test_v1_task_published_is_read_with_no_initial_snapshot_and_default_limits(codec: Codec) -> None:
    from schemas.blobs import BlobRef
    from schemas.common import Producer, RecordMeta
    from schemas.publications import TaskPublished
    from schemas.requests import ResourceLimits

    today = TaskPublished(
        RecordMeta("e-1", 1, Producer("tasks-publisher", "h"), None),
        "task-1", "a" * 64, "fix it", "img:1", 30.0, "pytest", None, ("tests/**",),
        BlobRef.of(b"bundle"), {"source": "x"}, 0.25, "snap-1", ResourceLimits(cpus=0.5),
    )  # fmt: skip
    record = today.to_record()
    del record["initial_snapshot_id"], record["limits"]  # what a v1 publisher wrote
    v1 = codec.catalog.version(TaskPublished.SCHEMA, 1)
    read = codec.decode_as(write_with(v1, record), TaskPublished)
    assert codec.schema_of(write_with(v1, record)) == (TaskPublished.SCHEMA, 1)
    assert (read.initial_snapshot_id, read.limits) == (None, None)
    assert read.task_id == "task-1" and read.protected == ("tests/**",)
    assert codec.decode_as(codec.encode(today), TaskPublished) == today


def test_v2_task_published_is_read_as_unreviewed(codec: Codec) -> None:
    from schemas.blobs import BlobRef
    from schemas.common import Producer, RecordMeta
    from schemas.publications import ReviewStatus, TaskPublished

    today = TaskPublished(
        RecordMeta("e-1", 1, Producer("tasks-publisher", "h"), None),
        "task-1", "a" * 64, "fix it", "img:1", 30.0, "pytest", None, ("tests/**",),
        BlobRef.of(b"bundle"), {}, None, "snap-1", None, ReviewStatus.ACCEPTED, "ada",
    )  # fmt: skip
    record = today.to_record()
    del record["review"], record["reviewer"]  # what a v2 publisher wrote: there were no reviews
    v2 = codec.catalog.version(TaskPublished.SCHEMA, 2)
    data = write_with(v2, record)
    assert codec.schema_of(data) == (TaskPublished.SCHEMA, 2)
    read = codec.decode_as(data, TaskPublished)
    # No upcaster: the default is the truth, nothing published before v3 had been reviewed.
    assert (read.review, read.reviewer) == (ReviewStatus.UNREVIEWED, None)
    assert read.initial_snapshot_id == "snap-1" and read.task_id == "task-1"
    assert codec.decode_as(codec.encode(today), TaskPublished) == today


# -- v2 of the messages that carry an action (InvalidReply joined the action union) -------------------------


def _episode_with_steps(codec: Codec) -> EpisodeScript:
    script = EpisodeScript(codec)
    script.start()
    script.act(RunCommand("ls"))
    script.execute(stdout=b"calc.py\n")
    script.act(Submit())
    return script


def _carriers(codec: Codec) -> list[Any]:
    """One record of each message that embeds an ActionProposed, with no InvalidReply (v1 can hold it)."""
    script = _episode_with_steps(codec)
    state = fold(script.entries)
    meta = script.meta("streams")
    action = script.events[1]
    assert isinstance(action, ActionProposed)
    return [
        action,
        state,
        PolicyRequest(meta, "Fix it.", state.history, SamplingParams(seed=3)),
        TrajectoryCompleted(meta, "g-1", "Fix it.", state.steps, 1.0, Verdict.PASS, 3, 3, 1, 1),
        TrajectoryFailed(meta, FailureClass.STEP_LIMIT, "too long", state.steps),
    ]


def _trajectory(codec: Codec) -> TrajectoryCompleted:
    trajectory = _carriers(codec)[3]
    assert isinstance(trajectory, TrajectoryCompleted)
    return trajectory


def test_v1_messages_carrying_actions_are_read_by_todays_code(codec: Codec) -> None:
    for value in _carriers(codec):
        v1 = codec.catalog.version(value.SCHEMA, 1)
        data = write_with(v1, value.to_record())
        assert codec.schema_of(data) == (value.SCHEMA, 1)
        assert codec.decode_as(data, type(value)) == value
        assert codec.schema_of(codec.encode(value))[1] >= 2


def test_an_invalid_reply_round_trips_in_every_v2_carrier(codec: Codec) -> None:
    script = EpisodeScript(codec)
    script.start()
    invalid = InvalidReply.of("Your reply has no action.", "x" * 5000)
    assert len(invalid.reply) == INVALID_REPLY_CHARS and invalid.reply_truncated
    script.act(invalid)
    script.execute(exit_code=2, stderr=invalid.error.encode(), kind="streams")
    state = fold(script.entries)
    assert state.history[0].action.action == invalid
    request = PolicyRequest(script.meta("streams"), "Fix it.", state.history, SamplingParams())
    for value in (script.events[1], state, request):
        assert codec.decode(codec.encode(value)) == value
    v1_only = Codec(SchemaCatalog([sv for sv in codec.catalog.all_versions() if sv.version == 1]), types=[])
    with pytest.raises(DecodeError) as err:
        v1_only.decode_record(codec.encode(script.events[1]))
    assert err.value.reason is DecodeReason.UNKNOWN_FINGERPRINT


# -- v2 of RewardAssigned: tamper signals (and v3 of the EpisodeSnapshot that embeds it) --------------------


def _graded(codec: Codec, signals: tuple[str, ...] = ()) -> tuple[EpisodeScript, RewardAssigned]:
    script = _episode_with_steps(codec)
    reward = script.reward(-1.0, Verdict.TAMPERED, passed=0, total=3)
    graded = dataclasses.replace(reward, tampered_paths=("tests/t\udcff.py",), tamper_signals=signals)
    return script, graded


def test_a_v1_reward_reads_today_with_no_tamper_signals(codec: Codec) -> None:
    """A v1 verifier recorded no signals: [] is what its records mean, so no upcaster is registered."""
    _, graded = _graded(codec)
    record = graded.to_record()
    for since_v2_to_v4 in ("tamper_signals", "versions", "duration_us", "outcome_reward", "components"):
        del record[since_v2_to_v4]  # what a v1 verifier wrote
    v1 = codec.catalog.version(RewardAssigned.SCHEMA, 1)
    data = write_with(v1, record)
    assert codec.schema_of(data) == (RewardAssigned.SCHEMA, 1)
    read = codec.decode_as(data, RewardAssigned)
    assert read == graded and read.tamper_signals == () and read.tampered_paths == ("tests/t\udcff.py",)
    assert upcast_chain(RewardAssigned.SCHEMA, 1, 2) == ()
    assert codec.schema_of(codec.encode(read)) == (RewardAssigned.SCHEMA, 4)


def test_a_v2_reward_reads_today_naming_no_versions(codec: Codec) -> None:
    """A v2 verifier named no versions and no grading time: None and 0 are what its records mean."""
    _, graded = _graded(codec, ("a signal",))
    record = graded.to_record()
    del record["versions"], record["duration_us"], record["outcome_reward"], record["components"]
    data = write_with(codec.catalog.version(RewardAssigned.SCHEMA, 2), record)
    read = codec.decode_as(data, RewardAssigned)
    assert read == graded and read.versions is None and read.duration_us == 0
    assert read.tamper_signals == ("a signal",)
    assert upcast_chain(RewardAssigned.SCHEMA, 2, 3) == ()


def test_grade_versions_round_trip_in_the_reward_and_the_snapshot(codec: Codec) -> None:
    script, graded = _graded(codec)
    named = dataclasses.replace(
        graded, versions=GradeVersions("v" * 64, "sha256:" + "i" * 64, "t" * 64, "r" * 64), duration_us=1234
    )
    assert codec.decode_as(codec.encode(named), RewardAssigned) == named
    state = dataclasses.replace(fold(script.entries), reward=named)
    assert codec.decode_as(codec.encode(state), EpisodeState).reward == named


def test_a_v2_trajectory_reads_today_naming_no_grade_versions(codec: Codec) -> None:
    trajectory = _trajectory(codec)
    record = trajectory.to_record()
    del record["grade_versions"], record["graded_at_us"]
    data = write_with(codec.catalog.version(TrajectoryCompleted.SCHEMA, 2), record)
    read = codec.decode_as(data, TrajectoryCompleted)
    assert read == trajectory and read.grade_versions is None and read.graded_at_us == 0
    versions = GradeVersions("a", "b", "c", "d")
    named = dataclasses.replace(trajectory, grade_versions=versions, graded_at_us=7)
    assert codec.decode_as(codec.encode(named), TrajectoryCompleted) == named
    assert codec.schema_of(codec.encode(named)) == (TrajectoryCompleted.SCHEMA, 3)


def test_tamper_signals_round_trip_losslessly_in_the_reward_and_the_snapshot(codec: Codec) -> None:
    signals = ("framework object replaced: _pytest.runner.call_and_report", "gc walk from t\udcfe.py")
    script, graded = _graded(codec, signals)
    assert codec.decode_as(codec.encode(graded), RewardAssigned).tamper_signals == signals
    state = dataclasses.replace(fold(script.entries), reward=graded)
    assert codec.decode_as(codec.encode(state), EpisodeState).reward == graded
    assert codec.schema_of(codec.encode(state)) == (EpisodeState.SCHEMA, 5)


def test_a_v2_snapshot_with_a_v1_reward_reads_today(codec: Codec) -> None:
    script, graded = _graded(codec)
    record = dataclasses.replace(fold(script.entries), reward=graded).to_record()
    for since_v2_to_v4 in ("tamper_signals", "outcome_reward", "components"):
        del record["reward"][1][since_v2_to_v4]  # (branch, record): fastavro's union notation
    v2 = codec.catalog.version(EpisodeState.SCHEMA, 2)
    read = codec.decode_as(write_with(v2, record), EpisodeState)
    assert read.reward == graded


# -- v4 of RewardAssigned: the outcome's share and the components (and v5 of the EpisodeSnapshot) ---------


@pytest.mark.parametrize("reward", [1.0, -1.0, 0.4666])
def test_a_v3_reward_reads_today_as_the_outcome_alone(codec: Codec, reward: float) -> None:
    """Before v4 a reward was the outcome rule alone: the upcaster, not the default 0.0, says so."""
    _, graded = _graded(codec)
    graded = dataclasses.replace(graded, reward=reward, outcome_reward=None)
    record = graded.to_record()
    del record["outcome_reward"], record["components"]
    data = write_with(codec.catalog.version(RewardAssigned.SCHEMA, 3), record)
    read = codec.decode_as(data, RewardAssigned)
    assert read.outcome_reward == reward and read.components == () and read == graded
    assert codec.schema_of(codec.encode(read)) == (RewardAssigned.SCHEMA, 4)


def test_a_v4_snapshot_with_a_v3_reward_reads_today(codec: Codec) -> None:
    script, graded = _graded(codec)
    state = dataclasses.replace(fold(script.entries), reward=graded)
    record = state.to_record()
    del record["reward"][1]["outcome_reward"], record["reward"][1]["components"]
    read = codec.decode_as(write_with(codec.catalog.version(EpisodeState.SCHEMA, 4), record), EpisodeState)
    assert read.reward == graded and read.reward is not None and read.reward.outcome_reward == -1.0
    bare = dataclasses.replace(state, reward=None).to_record()  # a state not graded yet: nothing to upcast
    read_bare = codec.decode_as(write_with(codec.catalog.version(EpisodeState.SCHEMA, 4), bare), EpisodeState)
    assert read_bare.reward is None


def test_components_round_trip_by_name(codec: Codec) -> None:
    _, graded = _graded(codec)
    composed = dataclasses.replace(
        graded, reward=0.9, outcome_reward=0.8, components=(("efficiency", 0.5), ("change_size", 0.25))
    )
    read = codec.decode_as(codec.encode(composed), RewardAssigned)
    assert read == composed and dict(read.components) == {"efficiency": 0.5, "change_size": 0.25}
    assert read.components[0][0] == "change_size"  # kept sorted: equal grades compare equal
