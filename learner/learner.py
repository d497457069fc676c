"""The learner: take in `trajectories.completed` near-on-policy, train, checkpoint, publish.

`Learner` carries out the planner's decisions (`learner.state`): it feeds every record it reads to the
planner, and for the oldest ready groups (up to `groups_per_step`, once a poll's records are all in)
builds the samples, takes one training step (`epochs` passes), puts the merged weights in the object
store, checkpoints (weights, optimizer, offsets, waiting trajectories, the announcement) and
announces the new version. `learner.loop.run` is the loop around it, over the Kafka feed and announcer of
`learner.kafka_io`. It obeys the run's control log (`follow`): each change of the control state is a
planner input (`Control`), so quarantined trajectories are never trained on and trajectories whose grader
is not vouched for wait (`learner.state`).

Killed at any moment, a restarted learner resumes from its last checkpoint: trajectories read after it are
read again, trajectories held in it are restored, an announcement it holds is sent if `policy.versions`
lacks it. Nothing is lost and nothing is trained twice.

Across N processes (`ranks`: `learner.ranks.Leader`) this learner is rank 0: it alone reads, plans,
checkpoints and announces; a step's training is shared with the other ranks, and the checkpoint records
every rank's state (which must agree).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from kafka.errors import KafkaError

from actors.guard import control as run_control
from learner import checkpoint
from learner.defaults import STATS_FILE
from learner.lora import Adaptation, adapt, load_trainable_state, merged_weights, trainable_parameters
from learner.lora import trainable_state as current_trainable_state
from learner.publish import Announcer, announce_once, store_weights
from learner.ranks import OneRank, Ranks
from learner.samples import PromptEncoder, SampleCounts, group_samples, turn_bonuses
from learner.state import (
    Arrival,
    Control,
    Counters,
    Decision,
    Discarded,
    Dropped,
    Input,
    PlannerConfig,
    PlannerState,
    ReadyGroup,
    Trained,
    apply,
    next_step,
)
from learner.step import Sample
from learner.trainer import TrainSettings, TrainStats
from schemas.blobs import ObjectStore
from schemas.codec import Codec, default_codec
from schemas.origin import Origin
from schemas.progress import StepGraded
from schemas.publications import PolicyPublished
from streams.telemetry import metrics, tracing
from streams.telemetry.ids import Headers

log = logging.getLogger(__name__)
MAX_GRADED_EPISODES = 100_000


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
    # Weight of the process rewards (schemas.progress: a step's change in pass rate, from the grades of
    # progress.results) added to each turn's advantage. 0: the outcome reward alone (the default).
    process_reward_coef: float = 0.0

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError(f"epochs must be at least 1, not {self.epochs}")
        if not (0.0 <= self.process_reward_coef <= 10.0):
            raise ValueError(f"process_reward_coef must be in [0, 10], not {self.process_reward_coef}")


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
        ranks: Ranks | None = None,
    ) -> None:
        self.model = model
        self.encoder = encoder
        self.store = store
        self.announcer = announcer
        self.settings = settings
        self.origin = origin
        self.codec = codec or default_codec()
        self.ranks: Ranks = ranks if ranks is not None else OneRank()
        self.optimizer = prepare(model, settings)
        self.state = PlannerState()
        self.control = run_control.ControlState(settings.run_id)  # the fold of run.control read so far
        self.published: PolicyPublished | None = None
        self.unannounced: PolicyPublished | None = None  # checkpointed, not yet on policy.versions
        self.activity = Activity()
        # Process grades of episodes not trained yet, by episode (`take_grades`; only with a coefficient).
        self.grades: dict[str, list[StepGraded]] = {}
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

    def follow(self, records: Iterable[object]) -> list[Decision]:
        """Fold records of `run.control` into the control state; a change is offered to the planner (held
        trajectories re-examined, waiting ones a new rule matches taken out)."""
        state = self.control
        for record in records:
            state = run_control.apply(state, record)
        if state is self.control and self.state.control is not None:
            return []
        if state.is_paused and not self.control.is_paused and state.paused is not None:
            log.info("the run is paused (%s); the learner goes on with what it holds", state.paused.reason)
        self.control = state
        return self.offer(Control(state))

    def offer(self, event: Input, headers: Headers = None) -> list[Decision]:
        """Feed one input to the planner (groups it makes ready wait for `train_ready`, so that a poll's
        records are all taken in before a step: a backlog then trains `groups_per_step` groups at a time).
        A trajectory's arrival is traced as a span of its episode, under the span named by its record's
        `headers` (the owner's)."""
        if isinstance(event, Arrival):
            with self._consumed(event, headers):
                decisions = self._apply(event)
        else:
            decisions = self._apply(event)
        for decision in decisions:
            if isinstance(decision, Dropped):
                log.info("dropped %d trajectories of %s: %s", len(decision.episode_ids), decision.group_key,
                         decision.why.value)  # fmt: skip
        return decisions

    def _apply(self, event: Input) -> list[Decision]:
        """The planner's step, its counters' increments counted in the metrics (by outcome)."""
        before = self.state.counters
        self.state, decisions = apply(self.state, event, self.settings.planner)
        if self.state.counters is not before:
            metrics.learner_outcomes(_increments(before, self.state.counters))
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

    def take_grades(self, records: Iterable[object]) -> None:
        """Keep the process grades of `progress.results` for the episodes still to be trained (the oldest
        episodes' are dropped past `MAX_GRADED_EPISODES`: an episode that never reaches a step)."""
        for record in records:
            if isinstance(record, StepGraded) and record.meta.run_id == self.settings.run_id:
                self.grades.setdefault(record.meta.episode_id, []).append(record)
        while len(self.grades) > MAX_GRADED_EPISODES:
            del self.grades[next(iter(self.grades))]

    def _bonuses(self, groups: Sequence[ReadyGroup]) -> dict[str, list[float]]:
        coef = self.settings.process_reward_coef
        if coef <= 0.0:
            return {}
        return {
            m.episode_id: turn_bonuses(m.trajectory, self.grades.get(m.episode_id, ()), coef)
            for group in groups for m in group.members
        }  # fmt: skip

    def train_ready(self) -> None:
        # A version is announced before the next is trained: the checkpoint holds one announcement, so
        # training on past an unannounced version could leave a gap in policy.versions after a crash.
        while self.state.ready and self.unannounced is None:
            self._train(next_step(self.state, self.settings.planner))
        self.ranks.idle()

    def _train(self, step: tuple[ReadyGroup, ...]) -> None:
        """One training step on the groups `step` (one new version); a group without a usable sample is
        discarded first (no step at all when none has one)."""
        started = time.monotonic()
        groups: list[ReadyGroup] = []
        samples: list[Sample] = []
        counts = SampleCounts()
        for group in step:
            trajectories = [m.trajectory for m in group.members]
            bonuses = self._bonuses([group])
            usable, group_counts = group_samples(trajectories, group.advantages, self.encoder, bonuses)
            self.activity.samples += group_counts
            if not usable:
                log.warning("group %s has no usable sample (%s); not trained", group.group_key, group_counts)
                self._apply(Discarded(group.group_key))
                continue
            groups.append(group)
            samples.extend(usable)
            counts += group_counts
        if not groups:
            return
        version = self.state.version + 1
        episodes = [m.episode_id for g in groups for m in g.members]
        for episode in episodes:  # trained: their grades are spent
            self.grades.pop(episode, None)
        # The step's own trace, linked to every episode it trains on: from a version to its episodes.
        with tracing.learner_step_span(
            self.settings.run_id, version, episodes, {"trialog.learner.groups": len(groups)}
        ) as span:
            passes = self.ranks.train(
                self.model, self.optimizer, samples, self.settings.epochs, self.settings.train
            )
            last = passes[-1]
            span.set_attributes({
                "trialog.learner.trajectories": len(episodes), "trialog.learner.samples": last.samples,
                "trialog.learner.tokens": last.tokens, "trialog.learner.loss": last.loss,
                "trialog.learner.approx_kl": last.approx_kl, "trialog.learner.grad_norm": last.grad_norm,
            })  # fmt: skip
            published = store_weights(self.store, merged_weights(self.model), origin=self.origin,
                                      run_id=self.settings.run_id, version=version,
                                      trajectories=len(episodes))  # fmt: skip
        keys = tuple(g.group_key for g in groups)
        decisions = self._apply(Trained(keys))
        self._checkpoint(published)
        self.published = self.unannounced = published
        self.announce_pending()
        self.activity.busy_s += time.monotonic() - started
        self._report(groups, passes, counts)
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
            ranks=self.ranks.agreed,
        )
        checkpoint.save(self.settings.checkpoint_dir, saved, self.codec)
        self._saved = self.state

    def _report(
        self, groups: Sequence[ReadyGroup], passes: Sequence[TrainStats], counts: SampleCounts
    ) -> None:
        """One line of `STATS_FILE` per version: its groups (rewards and staleness per group), the step's
        statistics (`train`: the last pass; `passes`: every one; `mismatch`: the first pass's log-prob
        gap, measured before the step changed the weights) and the counters after it."""
        members = [m for g in groups for m in g.members]
        stats, first = passes[-1], passes[0]
        staleness = [self.state.version - 1 - m.trajectory.min_policy_version for m in members]
        line = {
            "version": self.state.version,
            "groups": [g.group_key for g in groups],
            "trajectories": len(members),
            "episodes": [m.episode_id for m in members],  # what this version was trained on, by episode
            "partial": [g.partial for g in groups],
            "rewards": [[m.trajectory.reward for m in g.members] for g in groups],
            "staleness": [
                [self.state.version - 1 - m.trajectory.min_policy_version for m in g.members] for g in groups
            ],
            "train": asdict(stats),
            "passes": [asdict(p) for p in passes],
            "mismatch": {"mean": first.logprob_gap_mean, "max": first.logprob_gap_max},
            "staleness_histogram": {str(k): staleness.count(k) for k in sorted(set(staleness))},
            "samples": asdict(counts),
            "counters": asdict(self.state.counters),
            "held": len(self.state.held),  # waiting for their grader's clearance
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


def prepare(model: Any, settings: LearnerSettings) -> torch.optim.Optimizer:
    """Adapt `model` for training as `settings` say and make its optimizer: what every rank of a learner
    does alike (rank 0 in `Learner`, the others before `learner.ranks.follow`)."""
    adapt(model, settings.adaptation)
    return torch.optim.AdamW(trainable_parameters(model), lr=settings.lr)


def _increments(before: Counters, after: Counters) -> dict[str, int]:
    was = asdict(before)
    return {name: value - was[name] for name, value in asdict(after).items() if value != was[name]}
