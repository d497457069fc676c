"""The topic catalogue: every topic of a run (DESIGN.md, "The log"), its partitions and retention, what its
records are keyed by and which record types it carries.

One place for the names, so that no module spells a topic as a string: a typo there would be a topic that
nobody reads (the broker never auto-creates topics, so it would fail at once, but only at run time). The
record types say what a reader of the topic may decode (a request loop reads only its request type; the
streams worker accepts only the answer types of a result topic). Creating the topics on a broker is
`streams.kafka.topics.ensure_topics`.

A run's topics are prefixed with the run's name (`topic.of(run)`, `topic_name`); the default run ("") has
the bare names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from schemas.alerts import Alert
from schemas.canaries import CanaryGraded
from schemas.commands import AbortEpisode, StartEpisode
from schemas.deadletter import DeadLetter
from schemas.difficulty import TaskDifficulty
from schemas.events import (
    EPISODE_EVENT_TYPES,
    ActionProposed,
    EpisodeFailed,
    RewardAssigned,
    StepExecuted,
)
from schemas.progress import StepGraded
from schemas.publications import PolicyPublished, TaskPublished, TaskReviewed
from schemas.record import Record
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.run_control import CONTROL_TYPES
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed


class Key(StrEnum):
    """What a topic's record key is: it decides the partition, hence what is read in order."""

    EPISODE_ID = "episode id"  # an episode's records in order, on one partition
    TASK_ID = "task id"  # a task's records together (compaction keeps the last; a group's trajectories)
    NONE = "none"  # no key: one partition, the order of sending


# The episode log is the record of a run, replayed for audits: it is kept, never aged out.
KEEP: Mapping[str, str] = MappingProxyType({"retention.ms": "-1", "retention.bytes": "-1"})
# The broker refuses a record whose create time is this much older than its clock: the bound on how late a
# stalled streams worker's writes can land (`streams.fencing`), on the topics only an episode's owner writes.
LATE_WRITE_MAX_MS = 2000
FENCED: Mapping[str, str] = MappingProxyType(
    {"message.timestamp.type": "CreateTime", "message.timestamp.before.max.ms": str(LATE_WRITE_MAX_MS)}
)
# The task set: the last version of each task is what counts.
COMPACT: Mapping[str, str] = MappingProxyType({"cleanup.policy": "compact"})


def topic_name(run: str, base: str) -> str:
    """`run42.episode.events` for run "run42"; the bare name for the default run (""). Also the prefix of
    the run's consumer groups and application ids."""
    return f"{run}.{base}" if run else base


@dataclass(frozen=True, slots=True)
class Topic:
    name: str  # the base name; a run's topic is `of(run)`
    partitions: int
    key: Key
    records: tuple[type[Record], ...]  # the record types written to it
    config: Mapping[str, str] = field(default_factory=lambda: KEEP, hash=False)  # broker topic configs

    def of(self, run: str) -> str:
        """This topic's full name in `run`."""
        return topic_name(run, self.name)


# A task's publication is keyed by its id, its measured difficulty by `difficulty/<task id>`
# (schemas.difficulty), its reviews by `review/<id>/<version>` (`review_key`): compaction keeps the last of
# each key, so none ever drops another. Readers of tasks skip the records they do not want by type.
TASKS = Topic("tasks", 1, Key.TASK_ID, (TaskPublished, TaskDifficulty, TaskReviewed), COMPACT)
EPISODE_COMMANDS = Topic("episode.commands", 8, Key.EPISODE_ID, (StartEpisode, AbortEpisode))
EPISODE_EVENTS = Topic("episode.events", 8, Key.EPISODE_ID, EPISODE_EVENT_TYPES, {**KEEP, **FENCED})
POLICY_REQUESTS = Topic("policy.requests", 8, Key.EPISODE_ID, (PolicyRequest,))
POLICY_RESULTS = Topic("policy.results", 8, Key.EPISODE_ID, (ActionProposed,))
SANDBOX_REQUESTS = Topic("sandbox.requests", 8, Key.EPISODE_ID, (SandboxRequest,))
# EpisodeFailed: a step the sandbox could not run (an invalid action, a lost sandbox).
SANDBOX_RESULTS = Topic("sandbox.results", 8, Key.EPISODE_ID, (StepExecuted, EpisodeFailed))
VERIFY_REQUESTS = Topic("verify.requests", 8, Key.EPISODE_ID, (VerifyRequest,))
VERIFY_RESULTS = Topic("verify.results", 8, Key.EPISODE_ID, (RewardAssigned,))
# Keyed by task: a task's group of episodes lands on one partition, for group-relative advantages.
TRAJECTORIES_COMPLETED = Topic("trajectories.completed", 8, Key.TASK_ID, (TrajectoryCompleted,))
TRAJECTORIES_FAILED = Topic("trajectories.failed", 8, Key.EPISODE_ID, (TrajectoryFailed,))
POLICY_VERSIONS = Topic("policy.versions", 1, Key.NONE, (PolicyPublished,))
DEADLETTER = Topic("deadletter", 1, Key.NONE, (DeadLetter,))
# The run's pins and the decisions taken about it (pause, resume, quarantine, clearance): one partition,
# so every reader folds them in the one order they were decided in.
RUN_CONTROL = Topic("run.control", 1, Key.NONE, CONTROL_TYPES)
# Canaries: known workspaces the guard asks the verifiers to grade, beside (never among) the episodes.
CANARY_REQUESTS = Topic("canary.requests", 2, Key.EPISODE_ID, (VerifyRequest,))
CANARY_RESULTS = Topic("canary.results", 2, Key.EPISODE_ID, (RewardAssigned,))
CANARY_GRADES = Topic("canary.grades", 1, Key.NONE, (CanaryGraded,))
ALERTS = Topic("alerts", 1, Key.NONE, (Alert,))
# Process grades: intermediate workspaces the owner asks the verifiers to grade beside the episodes, never
# awaited (schemas.progress).
PROGRESS_REQUESTS = Topic("progress.requests", 8, Key.EPISODE_ID, (VerifyRequest,))
PROGRESS_RESULTS = Topic("progress.results", 8, Key.EPISODE_ID, (StepGraded,))

TOPICS: tuple[Topic, ...] = (
    TASKS,
    EPISODE_COMMANDS,
    EPISODE_EVENTS,
    POLICY_REQUESTS,
    POLICY_RESULTS,
    SANDBOX_REQUESTS,
    SANDBOX_RESULTS,
    VERIFY_REQUESTS,
    VERIFY_RESULTS,
    TRAJECTORIES_COMPLETED,
    TRAJECTORIES_FAILED,
    POLICY_VERSIONS,
    DEADLETTER,
    RUN_CONTROL,
    CANARY_REQUESTS,
    CANARY_RESULTS,
    CANARY_GRADES,
    ALERTS,
    PROGRESS_REQUESTS,
    PROGRESS_RESULTS,
)
"""Every topic of a run, in the order they are created."""

ANSWERS: tuple[Topic, ...] = (POLICY_RESULTS, SANDBOX_RESULTS, VERIFY_RESULTS)
"""The result topics the episodes' owner reads (beside `EPISODE_COMMANDS`)."""

TRAJECTORIES: tuple[Topic, ...] = (TRAJECTORIES_COMPLETED, TRAJECTORIES_FAILED)
"""Where finished episodes go, rewarded or not."""


def by_name(base: str) -> Topic:
    """The topic whose base name is `base` (a name read from the command line or a file)."""
    for topic in TOPICS:
        if topic.name == base:
            return topic
    raise KeyError(f"no topic named {base!r} (known: {', '.join(t.name for t in TOPICS)})")
