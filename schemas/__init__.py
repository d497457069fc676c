"""Avro schemas, the registry-free codec and the event model of trialog.

Every fact of a run is an Avro record encoded with single-object encoding (`codec`); every piece of
episode state is a fold of episode events (`fold`). Kafka and Faust adapters live in `kafka_serde` and
`faust_codec` and are imported on demand.
"""

from schemas.actions import Action, ApplyPatch, InvalidReply, RunCommand, SandboxAction, Submit, WriteFile
from schemas.blobs import (
    BlobRef,
    LocalObjectStore,
    MemoryObjectStore,
    ObjectStore,
    inline_or_ref,
    text_or_ref,
)
from schemas.catalog import SchemaCatalog, SchemaError
from schemas.chain import ChainBreak, ChainReport, digest, verify_chain
from schemas.codec import Codec, DecodeError, DecodeReason, EncodeError, default_codec
from schemas.commands import AbortEpisode, StartEpisode
from schemas.common import (
    GENESIS_HASH,
    EpisodeConfig,
    EventMeta,
    FailureClass,
    Output,
    Producer,
    RecordMeta,
    Verdict,
)
from schemas.deadletter import DeadLetter
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
from schemas.fold import BrokenChain, ConflictingEvent, FoldError, OutOfOrder, WrongEpisode, apply, fold
from schemas.origin import Clock, FixedClock, IdSource, Origin, RandomIds, SequentialIds, SystemClock
from schemas.publications import PolicyPublished, TaskPublished
from schemas.replay import ReplayError, replay, replay_file
from schemas.requests import PolicyRequest, ResourceLimits, SamplingParams, SandboxRequest
from schemas.state import EpisodeState, Phase
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

__all__ = [
    "GENESIS_HASH",
    "AbortEpisode",
    "Action",
    "ActionProposed",
    "ApplyPatch",
    "BlobRef",
    "BrokenChain",
    "ChainBreak",
    "ChainReport",
    "Clock",
    "Codec",
    "ConflictingEvent",
    "DeadLetter",
    "DecodeError",
    "DecodeReason",
    "EncodeError",
    "EpisodeCompleted",
    "EpisodeConfig",
    "EpisodeEvent",
    "EpisodeFailed",
    "EpisodeStarted",
    "EpisodeState",
    "EventMeta",
    "FailureClass",
    "FixedClock",
    "FoldError",
    "IdSource",
    "InvalidReply",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectStore",
    "Origin",
    "OutOfOrder",
    "Output",
    "Phase",
    "PolicyPublished",
    "PolicyRequest",
    "Producer",
    "RandomIds",
    "RecordMeta",
    "ReplayError",
    "ResourceLimits",
    "RewardAssigned",
    "RunCommand",
    "SamplingParams",
    "SandboxAction",
    "SandboxRequest",
    "SchemaCatalog",
    "SchemaError",
    "SequentialIds",
    "StartEpisode",
    "StepExecuted",
    "StepRecord",
    "Submit",
    "SystemClock",
    "TaskPublished",
    "TrajectoryCompleted",
    "TrajectoryFailed",
    "Verdict",
    "WriteFile",
    "WrongEpisode",
    "apply",
    "default_codec",
    "digest",
    "fold",
    "inline_or_ref",
    "replay",
    "replay_file",
    "text_or_ref",
    "verify_chain",
]
