"""The learner process: consume `trajectories.completed` near-on-policy, train, checkpoint, publish.

`Learner` carries out the planner's decisions (`learner.state`): it feeds every record it reads to the
planner, and for the oldest ready groups (up to `groups_per_step`, once a poll's records are all in)
builds the samples, takes one training step (`epochs` passes), puts the merged weights in the object
store, checkpoints (weights, optimizer, offsets, waiting trajectories, the announcement) and
announces the new version. `run` is the Kafka loop around it: the learner assigns itself every partition of
the topic (no consumer group: one learner per run) and seeks to the checkpointed offsets, so the
checkpoint alone says what has been consumed.

Killed at any moment, a restarted learner resumes from its last checkpoint: trajectories read after it are
read again, trajectories held in it are restored, an announcement it holds is sent if `policy.versions`
lacks it. Nothing is lost and nothing is trained twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import torch
from kafka.errors import KafkaError

from learner import checkpoint
from learner.lora import Adaptation, adapt, load_trainable_state, merged_weights, trainable_parameters
from learner.lora import trainable_state as current_trainable_state
from learner.publish import Announcer, announce_once, store_weights
from learner.samples import PromptEncoder, SampleCounts, group_samples
from learner.state import (
    Arrival,
    Decision,
    Discarded,
    Dropped,
    Input,
    PlannerConfig,
    PlannerState,
    Position,
    ReadyGroup,
    Tick,
    Trained,
    Unreadable,
    apply,
    next_step,
)
from learner.step import Sample
from learner.trainer import TrainSettings, TrainStats, train_epochs
from schemas.blobs import ObjectStore
from schemas.codec import Codec, DecodeError, default_codec
from schemas.origin import Clock, Origin
from schemas.publications import PolicyPublished
from schemas.topics import POLICY_VERSIONS, TRAJECTORIES_COMPLETED
from schemas.trajectories import TrajectoryCompleted
from streams.telemetry import metrics, tracing
from streams.telemetry.ids import Headers

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 60.0
STATS_FILE = "stats.jsonl"
RETRY_S = 1.0
IDLE_CHECKPOINT_S = 10.0


@dataclass(frozen=True)
class LearnerSettings:
    run_id: str
    checkpoint_dir: Path
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    train: TrainSettings = field(default_factory=TrainSettings)
    adaptation: Adaptation = field(default_factory=Adaptation)
    lr: float = 1e-5
    # PPO-clipped passes over a step's samples, one optimizer step each, before the version is published
    # (the clipped ratio against the behaviour log-probs keeps later passes near the sampling policy).
    epochs: int = 1

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be at least 1, not {self.epochs}")


@dataclass
class Activity:
    """Where the learner's time goes: `busy_s` training and publishing, the rest waiting for data."""

    started: float = field(default_factory=time.monotonic)
    busy_s: float = 0.0
    samples: SampleCounts = field(default_factory=SampleCounts)

    def idle_fraction(self) -> float:
        wall = time.monotonic() - self.started
        return 1.0 - self.busy_s / wall if wall > 0 else 1.0


class Learner:
    def __init__(
        self,
        model: Any,
        encoder: PromptEncoder,
        store: ObjectStore,
        announcer: Announcer,
        settings: LearnerSettings,
        origin: Origin,
        codec: Codec | None = None,
    ) -> None:
        self.model = model
        self.encoder = encoder
        self.store = store
        self.announcer = announcer
        self.settings = settings
        self.origin = origin
        self.codec = codec or default_codec()
        adapt(model, settings.adaptation)
        self.optimizer = torch.optim.AdamW(trainable_parameters(model), lr=settings.lr)
        self.state = PlannerState()
        self.published: PolicyPublished | None = None
        self.unannounced: PolicyPublished | None = None  # checkpointed, not yet on policy.versions
        self.activity = Activity()
        self._saved = self.state  # the planner state the checkpoint holds (the initial one: no file needed)

    @property
    def adaptation_key(self) -> str:
        a = self.settings.adaptation
        return "full" if a.full else f"lora:{a.rank}:{a.alpha}:{','.join(a.targets)}"

    def resume(self) -> bool:
        """Continue from the checkpoint if there is one (re-announcing its version if needed)."""
        saved = checkpoint.load(self.settings.checkpoint_dir, self.codec)
        if saved is None:
            return False
        if saved.adaptation != self.adaptation_key:
            raise ValueError(f"the checkpoint trained {saved.adaptation}, not {self.adaptation_key}")
        load_trainable_state(self.model, saved.trainable)
        self.optimizer.load_state_dict(saved.optimizer)
        self.state, self.published = saved.planner, saved.published
        self._saved = self.state
        self.unannounced = saved.published
        self.announce_pending()
        return True

    def announce_pending(self) -> None:
        """Announce the checkpointed version if `policy.versions` lacks it; while Kafka cannot be reached
        it stays pending (the loop calls this again) and no further version is trained."""
        if self.unannounced is None:
            return
        try:
            if announce_once(self.announcer, self.unannounced, self.store):
                log.info("announced policy version %d", self.unannounced.version)
        except KafkaError as exc:
            log.warning("could not announce version %d yet (%s)", self.unannounced.version, exc)
            return
        self.unannounced = None

    def offer(self, event: Input, headers: Headers = None) -> list[Decision]:
        """Feed one input to the planner (groups it makes ready wait for `train_ready`, so that a poll's
        records are all taken in before a step: a backlog then trains `groups_per_step` groups at a time).
        A trajectory's arrival is traced as a span of its episode, under the span named by its record's
        `headers` (the owner's)."""
        if isinstance(event, Arrival):
            with self._consumed(event, headers):
                self.state, decisions = apply(self.state, event, self.settings.planner)
        else:
            self.state, decisions = apply(self.state, event, self.settings.planner)
        for decision in decisions:
            if isinstance(decision, Dropped):
                log.info("dropped %d trajectories of %s: %s", len(decision.episode_ids), decision.group_key,
                         decision.why.value)  # fmt: skip
        return decisions

    @contextlib.contextmanager
    def _consumed(self, arrival: Arrival, headers: Headers) -> Iterator[None]:
        """The span of taking in one trajectory (training, when it completes a group, comes after it) and
        the trajectory's staleness: policy versions between the oldest that sampled it and the learner's."""
        trajectory, at = arrival.trajectory, arrival.position
        metrics.staleness(self.state.version - trajectory.min_policy_version)
        with tracing.consumed_span(
            "learner.consume", trajectory.meta.episode_id, {"trialog.learner.version": self.state.version},
            headers=headers, topic=at.topic, partition=at.partition, offset=at.offset,
        ):  # fmt: skip
            tracing.annotate(trajectory)  # run, episode, task, task version, step, attempt, policy version
            yield

    def train_ready(self) -> None:
        # A version is announced before the next is trained: the checkpoint holds one announcement, so
        # training on past an unannounced version could leave a gap in policy.versions after a crash.
        while self.state.ready and self.unannounced is None:
            self._train(next_step(self.state, self.settings.planner))

    def _train(self, step: tuple[ReadyGroup, ...]) -> None:
        """One training step on the groups `step` (one new version); a group without a usable sample is
        discarded first (no step at all when none has one)."""
        started = time.monotonic()
        groups: list[ReadyGroup] = []
        samples: list[Sample] = []
        counts = SampleCounts()
        for group in step:
            trajectories = [m.trajectory for m in group.members]
            usable, group_counts = group_samples(trajectories, group.advantages, self.encoder)
            self.activity.samples += group_counts
            if not usable:
                log.warning("group %s has no usable sample (%s); not trained", group.group_key, group_counts)
                self.state, _ = apply(self.state, Discarded(group.group_key), self.settings.planner)
                continue
            groups.append(group)
            samples.extend(usable)
            counts += group_counts
        if not groups:
            return
        passes = train_epochs(self.model, self.optimizer, samples, self.settings.epochs, self.settings.train)
        stats = passes[-1]  # the report keeps the last pass's statistics
        version = self.state.version + 1
        published = store_weights(self.store, merged_weights(self.model), origin=self.origin,
                                  run_id=self.settings.run_id, version=version,
                                  trajectories=sum(len(g.members) for g in groups))  # fmt: skip
        keys = tuple(g.group_key for g in groups)
        self.state, decisions = apply(self.state, Trained(keys), self.settings.planner)
        self._checkpoint(published)
        self.published = self.unannounced = published
        self.announce_pending()
        self.activity.busy_s += time.monotonic() - started
        self._report(groups, stats, counts)
        for decision in decisions:
            if isinstance(decision, Dropped):
                log.info("dropped %d stale trajectories of %s", len(decision.episode_ids), decision.group_key)

    def save_progress(self) -> bool:
        """Checkpoint what the planner took in since the last checkpoint without a training step (groups
        skipped, trajectories dropped or waiting, the offsets past them), with the current version's weights
        and announcement. Returns whether anything was written.

        Called when the learner has caught up with the topic and when it stops cleanly: a restart then does
        not read those records again, and the checkpoint accounts for every record consumed (what an
        operator or a test reads to see that nothing was lost). Never call it after a failed step: the
        model may then hold an update its version does not record."""
        if self.state is self._saved:
            return False
        self._checkpoint(self.published)
        return True

    def _checkpoint(self, published: PolicyPublished | None) -> None:
        saved = checkpoint.Checkpoint(
            planner=self.state,
            trainable=current_trainable_state(self.model),
            optimizer=self.optimizer.state_dict(),
            published=published,
            adaptation=self.adaptation_key,
        )
        checkpoint.save(self.settings.checkpoint_dir, saved, self.codec)
        self._saved = self.state

    def _report(self, groups: Sequence[ReadyGroup], stats: TrainStats, counts: SampleCounts) -> None:
        """One line of `STATS_FILE` per version: its groups (rewards and staleness per group), the step's
        statistics and the counters after it."""
        members = [m for g in groups for m in g.members]
        line = {
            "version": self.state.version,
            "groups": [g.group_key for g in groups],
            "trajectories": len(members),
            "partial": [g.partial for g in groups],
            "rewards": [[m.trajectory.reward for m in g.members] for g in groups],
            "staleness": [
                [self.state.version - 1 - m.trajectory.min_policy_version for m in g.members] for g in groups
            ],
            "train": asdict(stats),
            "samples": asdict(counts),
            "counters": asdict(self.state.counters),
            "idle_fraction": round(self.activity.idle_fraction(), 4),
        }
        with (self.settings.checkpoint_dir / STATS_FILE).open("a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
        log.info(
            "version %d: %d trajectories of %s, loss %.4f, ratio %.3f, %d samples, %.2f s",
            self.state.version, len(members), ", ".join(g.group_key for g in groups), stats.loss,
            stats.ratio_mean,
            stats.samples, stats.seconds,
        )  # fmt: skip


# ---- reading trajectories ---------------------------------------------------------------------------------


class Polled(NamedTuple):
    """A consumed record: where it was read, its value, its Kafka headers (the owner's `traceparent`)."""

    position: Position
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class Feed(Protocol):
    def poll(self, timeout_ms: int) -> list[Polled]: ...


def inputs(
    records: Iterable[tuple[Position, bytes | None] | Polled], codec: Codec, clock: Clock
) -> list[Input]:
    """Planner inputs for raw records: a trajectory, or an unreadable record (only its offset counts)."""
    out: list[Input] = []
    for record in records:
        position, value = record[0], record[1]
        trajectory = _decoded(value, codec)
        if trajectory is None:
            log.warning("unreadable record at %s", position)
            out.append(Unreadable(position))
        else:
            out.append(Arrival(trajectory, position, clock.now_us()))
    return out


def _decoded(value: bytes | None, codec: Codec) -> TrajectoryCompleted | None:
    if value is None:
        return None
    try:
        return codec.decode_as(value, TrajectoryCompleted)
    except DecodeError:
        return None


class KafkaFeed:
    """Every partition of the run's `trajectories.completed`, from the planner's offsets (or the start)."""

    def __init__(self, bootstrap: str, run: str, offsets: Mapping[tuple[str, int], int]) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.topic = TRAJECTORIES_COMPLETED.of(run)
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        partitions = self._consumer.partitions_for_topic(self.topic)
        if not partitions:
            raise RuntimeError(f"topic {self.topic} does not exist (create the run's topics first)")
        assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        self._consumer.assign(assigned)
        for tp in assigned:
            offset = offsets.get((self.topic, tp.partition))
            if offset is None:
                self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)

    def poll(self, timeout_ms: int) -> list[Polled]:
        polled = self._consumer.poll(timeout_ms=timeout_ms)
        return [
            Polled(Position(r.topic, r.partition, r.offset), r.value, tuple(r.headers or ()))
            for records in polled.values()
            for r in records
        ]

    def close(self) -> None:
        self._consumer.close()


class KafkaAnnouncer:
    """`policy.versions` of the run: announcements are sent with acks=all and waited for."""

    def __init__(self, bootstrap: str, run: str, codec: Codec | None = None) -> None:
        from kafka import KafkaProducer

        from actors.rollout.weights import KafkaPublications

        self.codec = codec or default_codec()
        self.topic = POLICY_VERSIONS.of(run)
        self._reader = KafkaPublications(bootstrap, run, self.codec)
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        self._versions: dict[str, set[int]] = {}

    def announced_versions(self, run_id: str) -> set[int]:
        for published in self._reader.poll():
            self._versions.setdefault(published.run_id, set()).add(published.version)
        return set(self._versions.get(run_id, set()))

    def announce(self, published: PolicyPublished) -> None:
        self._producer.send(self.topic, value=self.codec.encode(published)).get(SEND_TIMEOUT_S)
        self._versions.setdefault(published.run_id, set()).add(published.version)

    def close(self) -> None:
        self._reader.close()
        self._producer.close()


def run(
    learner: Learner,
    feed: Feed,
    clock: Clock,
    stopping: threading.Event,
    poll_ms: int = 500,
    idle_checkpoint_s: float = IDLE_CHECKPOINT_S,
) -> None:
    """Consume until `stopping` is set: each record of a poll, then a clock tick (group timeouts), then the
    training steps on what is ready. Progress without a training step is checkpointed when a poll finds
    nothing new (at most every `idle_checkpoint_s`) and at the end of a clean stop
    (`Learner.save_progress`)."""
    last_saved = time.monotonic()
    while not stopping.is_set():
        learner.announce_pending()
        learner.train_ready()  # groups ready in the checkpoint, or held back by an unsent announcement
        try:
            records = feed.poll(poll_ms)
        except KafkaError as exc:
            log.warning("Kafka unreachable while polling (%s); retrying", exc)
            stopping.wait(RETRY_S)
            continue
        for record, event in zip(records, inputs(records, learner.codec, clock), strict=True):
            learner.offer(event, record.headers)
        learner.offer(Tick(clock.now_us()))
        learner.train_ready()
        if not records and time.monotonic() - last_saved >= idle_checkpoint_s:
            last_saved = time.monotonic()
            if learner.save_progress():
                log.info("caught up: %s", _accounting(learner.state))
    if learner.save_progress():
        log.info("stopped: %s", _accounting(learner.state))


def _accounting(state: PlannerState) -> str:
    """One line saying where every consumed trajectory went, for the log."""
    c = state.counters
    return (
        f"version {state.version}, {sum(state.offsets.values())} records consumed: {c.arrived} trajectories "
        f"({c.trained} trained, {c.stale} stale, {c.all_equal} all-equal, {c.timeout} timed out, {c.late} "
        f"late, {c.unusable} unusable, {state.waiting} waiting), {c.duplicate} duplicates, "
        f"{c.unreadable} unreadable"
    )
