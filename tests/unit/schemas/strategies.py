"""Hypothesis strategies for every trialog record type, within the ranges of their Avro types."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from schemas.actions import Action, ApplyPatch, RunCommand, SandboxAction, Submit, WriteFile
from schemas.alerts import Alert, Severity
from schemas.blobs import BlobRef
from schemas.canaries import CanaryGraded
from schemas.commands import AbortEpisode, StartEpisode
from schemas.common import EpisodeConfig, EventMeta, FailureClass, Output, Producer, RecordMeta, Verdict
from schemas.deadletter import DeadLetter
from schemas.difficulty import TaskDifficulty
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
    StepRecord,
)
from schemas.progress import StepGraded
from schemas.publications import PolicyPublished, ReviewDecision, ReviewStatus, TaskPublished, TaskReviewed
from schemas.record import Record
from schemas.requests import PolicyRequest, ResourceLimits, SamplingParams, SandboxRequest, VerifyRequest
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
from schemas.state import EpisodeState, Phase
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from schemas.versions import GradeVersions

INT = st.integers(-(2**31), 2**31 - 1)
LONG = st.integers(-(2**63), 2**63 - 1)
NAT = st.integers(0, 2**31 - 1)
DOUBLE = st.floats(allow_nan=False)  # NaN != NaN would make equality meaningless, not the codec wrong
FLOAT32 = st.floats(width=32, allow_nan=False)
TEXT = st.text(max_size=20)
SHORT = st.lists(TEXT, max_size=3).map(tuple)
HEX64 = st.binary(min_size=32, max_size=32).map(bytes.hex)
OPT_TEXT = st.none() | TEXT


def small(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(strategy, max_size=3).map(tuple)


producers = st.builds(Producer, TEXT, TEXT)
blob_refs = st.builds(BlobRef, HEX64, st.integers(0, 2**40), TEXT)
event_metas = st.builds(
    EventMeta, TEXT, LONG, producers, TEXT, TEXT, TEXT, HEX64, NAT, NAT, LONG, OPT_TEXT, HEX64, OPT_TEXT
)
record_metas = st.builds(RecordMeta, TEXT, LONG, producers, OPT_TEXT)
outputs = st.builds(Output, TEXT, st.booleans(), LONG, st.none() | blob_refs)
configs = st.builds(EpisodeConfig, NAT, NAT, DOUBLE, DOUBLE, DOUBLE, NAT)
sandbox_actions: st.SearchStrategy[SandboxAction] = st.one_of(
    st.builds(RunCommand, TEXT),
    st.builds(WriteFile, TEXT, st.binary(max_size=20) | blob_refs),
    st.builds(ApplyPatch, TEXT | blob_refs),
)
actions: st.SearchStrategy[Action] = sandbox_actions | st.builds(Submit, TEXT)

episode_started = st.builds(EpisodeStarted, event_metas, TEXT, configs, TEXT, TEXT, LONG)
action_proposed = st.builds(
    ActionProposed, event_metas, actions, TEXT | blob_refs, INT, small(INT), small(FLOAT32), LONG, TEXT
)
step_executed = st.builds(
    StepExecuted, event_metas, INT, outputs, outputs, st.booleans(), LONG, st.booleans()
)
grade_versions = st.builds(GradeVersions, TEXT, TEXT, TEXT, TEXT)
reward_assigned = st.builds(
    RewardAssigned,
    event_metas,
    DOUBLE,
    st.sampled_from(Verdict),
    INT,
    INT,
    SHORT,
    SHORT,
    TEXT,
    st.none() | blob_refs,
    SHORT,
    st.none() | grade_versions,
    LONG,
    DOUBLE,
    st.dictionaries(TEXT, DOUBLE, max_size=3).map(lambda parts: tuple(parts.items())),
)
episode_completed = st.builds(EpisodeCompleted, event_metas, DOUBLE, st.sampled_from(Verdict), INT, LONG)
episode_failed = st.builds(EpisodeFailed, event_metas, st.sampled_from(FailureClass), TEXT, st.booleans())
step_records = st.builds(StepRecord, action_proposed, st.none() | step_executed)
states = st.builds(
    EpisodeState,
    TEXT,
    st.sampled_from(Phase),
    INT,
    INT,
    OPT_TEXT,
    HEX64,
    INT,
    LONG,
    st.none() | episode_started,
    st.lists(step_records, max_size=2).map(tuple),
    st.none() | action_proposed,
    st.none() | reward_assigned,
    st.none() | episode_completed | episode_failed,
)

RECORDS: dict[type[Record], st.SearchStrategy[Any]] = {
    EpisodeStarted: episode_started,
    ActionProposed: action_proposed,
    StepExecuted: step_executed,
    RewardAssigned: reward_assigned,
    EpisodeCompleted: episode_completed,
    EpisodeFailed: episode_failed,
    StartEpisode: st.builds(
        StartEpisode, record_metas, TEXT, TEXT, TEXT, HEX64, LONG, configs, TEXT, TEXT, LONG
    ),
    AbortEpisode: st.builds(AbortEpisode, record_metas, TEXT, TEXT, TEXT),
    PolicyRequest: st.builds(
        PolicyRequest,
        event_metas,
        TEXT,
        st.lists(step_records, max_size=2).map(tuple),
        st.builds(SamplingParams, DOUBLE, DOUBLE, INT, LONG),
    ),
    SandboxRequest: st.builds(
        SandboxRequest,
        event_metas,
        TEXT,
        sandbox_actions,
        DOUBLE,
        INT,
        st.builds(ResourceLimits, DOUBLE, INT, INT, INT),
    ),
    VerifyRequest: st.builds(
        VerifyRequest, event_metas, TEXT, DOUBLE, st.builds(ResourceLimits, DOUBLE, INT, INT, INT), INT, INT
    ),
    TrajectoryCompleted: st.builds(
        TrajectoryCompleted,
        event_metas,
        TEXT,
        TEXT,
        st.lists(step_records, max_size=2).map(tuple),
        DOUBLE,
        st.sampled_from(Verdict),
        INT,
        INT,
        LONG,
        LONG,
        st.none() | grade_versions,
        LONG,
    ),
    TrajectoryFailed: st.builds(
        TrajectoryFailed,
        event_metas,
        st.sampled_from(FailureClass),
        TEXT,
        st.lists(step_records, max_size=2).map(tuple),
    ),
    PolicyPublished: st.builds(PolicyPublished, record_metas, TEXT, LONG, LONG, TEXT, blob_refs, LONG),
    TaskPublished: st.builds(
        TaskPublished,
        record_metas,
        TEXT,
        HEX64,
        TEXT,
        TEXT,
        DOUBLE,
        TEXT,
        OPT_TEXT,
        SHORT,
        blob_refs,
        st.dictionaries(TEXT, TEXT, max_size=3),
        st.none() | DOUBLE,
        OPT_TEXT,
        st.none() | st.builds(ResourceLimits, DOUBLE, INT, INT, INT),
        st.sampled_from(ReviewStatus),
        OPT_TEXT,
    ),
    TaskReviewed: st.builds(
        TaskReviewed, record_metas, TEXT, HEX64, st.sampled_from(ReviewDecision), TEXT, TEXT
    ),
    DeadLetter: st.builds(
        DeadLetter,
        record_metas,
        TEXT,
        INT,
        LONG,
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=20),
        TEXT,
        TEXT,
        small(st.tuples(TEXT, st.none() | st.binary(max_size=8))),
    ),
    EpisodeState: states,
    RunPinned: st.builds(
        RunPinned,
        record_metas,
        TEXT,
        TEXT,
        TEXT,
        TEXT,
        small(st.builds(PinnedTask, TEXT, HEX64, TEXT)),
        st.builds(GuardSettings, DOUBLE, DOUBLE, st.booleans(), st.booleans()),
    ),
    VersionChanged: st.builds(
        VersionChanged, record_metas, TEXT, TEXT, TEXT, TEXT, OPT_TEXT, TEXT, producers
    ),
    RunPaused: st.builds(RunPaused, record_metas, TEXT, TEXT, OPT_TEXT),
    RunResumed: st.builds(RunResumed, record_metas, TEXT, TEXT),
    TrajectoriesQuarantined: st.builds(
        TrajectoriesQuarantined, record_metas, TEXT, TEXT, TEXT, TEXT, LONG, st.none() | LONG, TEXT, SHORT
    ),
    GraderCleared: st.builds(GraderCleared, record_metas, TEXT, TEXT, TEXT, LONG),
    StepGraded: st.builds(
        StepGraded, event_metas, st.sampled_from(Verdict), INT, INT, st.none() | grade_versions, LONG
    ),
    CanaryGraded: st.builds(
        CanaryGraded,
        record_metas,
        TEXT,
        TEXT,
        LONG,
        TEXT,
        TEXT,
        TEXT,
        st.booleans(),
        st.booleans(),
        DOUBLE,
        st.sampled_from(Verdict),
        INT,
        INT,
        st.none() | grade_versions,
        producers,
        LONG,
        LONG,
        LONG,
    ),
    TaskDifficulty: st.builds(
        TaskDifficulty, record_metas, TEXT, HEX64, LONG, INT, INT, DOUBLE, TEXT, TEXT, INT
    ),
    Alert: st.builds(
        Alert,
        record_metas,
        TEXT,
        TEXT,
        TEXT,
        st.sampled_from(Severity),
        TEXT,
        st.none() | DOUBLE,
        st.none() | DOUBLE,
        st.dictionaries(TEXT, TEXT, max_size=3),
    ),
}
