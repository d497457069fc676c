from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from kafka.errors import KafkaConnectionError
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from learner import checkpoint, testing
from learner.defaults import STATS_FILE
from learner.kafka_io import Polled, inputs
from learner.learner import Learner, LearnerSettings
from learner.loop import run
from learner.lora import Adaptation, trainable_state
from learner.publish import MemoryAnnouncer
from learner.samples import BytesPromptEncoder
from learner.state import PlannerConfig, Position, Unreadable
from learner.trainer import TrainSettings
from ops.telemetry.otel import OtelTracer
from schemas.blobs import MemoryObjectStore
from schemas.codec import default_codec
from schemas.origin import FixedClock
from schemas.publications import PolicyPublished
from streams.telemetry import tracing
from streams.telemetry.ids import (
    TRACEPARENT,
    SpanRef,
    episode_root_span_id,
    episode_trace_id,
    version_step_ref,
)
from tests.unit.actors.requests import fixed_origin

TOPIC = "run-test.trajectories.completed"
CODEC = default_codec()


class Crash(Exception):
    pass


class CrashingAnnouncer(MemoryAnnouncer):
    def announce(self, published: PolicyPublished) -> None:
        raise Crash("killed between the checkpoint and the announcement")


def make_learner(
    folder: Path,
    announcer: MemoryAnnouncer,
    store: MemoryObjectStore,
    groups_per_step: int = 1,
    epochs: int = 1,
) -> Learner:
    settings = LearnerSettings(
        run_id="run-test",
        checkpoint_dir=folder,
        planner=PlannerConfig(
            group_size=2, group_timeout_s=60, max_staleness=4, groups_per_step=groups_per_step
        ),
        train=TrainSettings(micro_batch=2),
        adaptation=Adaptation(rank=4),
        lr=1e-2,
        epochs=epochs,
    )
    return Learner(
        testing.tiny_llama(), BytesPromptEncoder(), store, announcer, settings, fixed_origin("learner")
    )


def feed(learner: Learner, group_id: str, rewards: list[float], first_offset: int) -> None:
    records = [
        (Position(TOPIC, 0, first_offset + i), CODEC.encode(t))
        for i, t in enumerate(testing.group(group_id, rewards))
    ]
    for event in inputs(records, CODEC, FixedClock()):
        learner.offer(event)
    learner.train_ready()


def test_a_ready_group_is_trained_stored_checkpointed_and_announced(tmp_path: Path) -> None:
    announcer, store = MemoryAnnouncer(), MemoryObjectStore()
    learner = make_learner(tmp_path, announcer, store)
    before = trainable_state(learner.model)
    feed(learner, "g1", [1.0, 0.0], 0)
    [published] = announcer.published
    assert (published.version, published.base_version, published.trajectories) == (1, 0, 2)
    assert store.contains(published.weights.sha256)
    saved = checkpoint.load(tmp_path)
    assert saved is not None
    assert saved.version == 1 and saved.published == published
    assert saved.planner.offsets == {(TOPIC, 0): 2}
    assert any(not torch.equal(before[k], v) for k, v in saved.trainable.items())
    [line] = (tmp_path / STATS_FILE).read_text().splitlines()
    report = json.loads(line)
    assert report["version"] == 1 and report["trajectories"] == 2
    assert report["counters"]["trained"] == 2
    # what an RL engineer reads per step: every pass, the mismatch before the step, staleness
    assert report["passes"] == [report["train"]]
    assert report["mismatch"]["max"] >= report["mismatch"]["mean"] >= 0.0
    assert report["staleness_histogram"] == {"0": 2}
    assert {"approx_kl", "entropy", "pg_fraction", "clip_fraction", "grad_norm", "advantage_std"} <= set(
        report["train"]
    )


def test_a_backlog_of_ready_groups_is_trained_in_steps_of_up_to_groups_per_step(tmp_path: Path) -> None:
    """What a restarted learner finds in its checkpoint, or one behind fast rollouts: several ready groups."""
    announcer, store = MemoryAnnouncer(), MemoryObjectStore()
    learner = make_learner(tmp_path, announcer, store, groups_per_step=2)
    records = [
        (Position(TOPIC, 0, offset), CODEC.encode(t))
        for offset, t in enumerate(t for g in ("g1", "g2", "g3") for t in testing.group(g, [1.0, 0.0]))
    ]
    for event in inputs(records, CODEC, FixedClock()):  # one poll's records: taken in before any step
        learner.offer(event)
    assert [g.group_key for g in learner.state.ready] == ["g1", "g2", "g3"]
    learner.train_ready()
    assert [(p.version, p.trajectories) for p in announcer.published] == [(1, 4), (2, 2)]
    lines = [json.loads(line) for line in (tmp_path / STATS_FILE).read_text().splitlines()]
    assert [line["groups"] for line in lines] == [["g1", "g2"], ["g3"]]
    assert [line["rewards"] for line in lines] == [[[1.0, 0.0], [1.0, 0.0]], [[1.0, 0.0]]]
    assert learner.state.counters.trained == 6 and learner.state.counters.steps == 2
    assert learner.state.ready == ()


def test_each_epoch_is_one_more_optimizer_step_on_the_same_samples(tmp_path: Path) -> None:
    trained = {}
    for epochs in (1, 2):
        learner = make_learner(tmp_path / str(epochs), MemoryAnnouncer(), MemoryObjectStore(), epochs=epochs)
        feed(learner, "g1", [1.0, 0.0], 0)
        assert learner.state.version == 1  # one version whatever the passes
        trained[epochs] = trainable_state(learner.model)
        assert learner.optimizer.state_dict()["state"][0]["step"] == epochs
    assert any(not torch.equal(trained[1][k], v) for k, v in trained[2].items())
    with pytest.raises(ValueError, match="epochs"):
        LearnerSettings(run_id="r", checkpoint_dir=tmp_path, epochs=0)


def test_a_restarted_learner_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    announcer, store = MemoryAnnouncer(), MemoryObjectStore()
    first = make_learner(tmp_path, announcer, store)
    feed(first, "g1", [1.0, 0.0], 0)
    feed(first, "g2", [0.0], 2)  # half a group, waiting in the checkpoint? not yet: no step since
    second = make_learner(tmp_path, announcer, store)
    assert second.resume()
    assert second.state.version == 1
    assert second.state.offsets == {(TOPIC, 0): 2}  # g2's record is read again after the restart
    resumed = trainable_state(second.model)
    assert all(torch.equal(t, resumed[name]) for name, t in trainable_state(first.model).items())
    assert len(announcer.published) == 1  # version 1 is on the topic already: not announced again


def test_a_crash_between_checkpoint_and_announcement_re_announces_the_same_weights(tmp_path: Path) -> None:
    store = MemoryObjectStore()
    crashing = make_learner(tmp_path, CrashingAnnouncer(), store)
    with pytest.raises(Crash):
        feed(crashing, "g1", [1.0, 0.0], 0)
    saved = checkpoint.load(tmp_path)
    assert saved is not None and saved.published is not None
    announcer = MemoryAnnouncer()
    restarted = make_learner(tmp_path, announcer, store)
    assert restarted.resume()
    assert announcer.published == [saved.published]  # the same event, the same weights' sha256
    restarted.resume()
    assert len(announcer.published) == 1


def test_unreadable_records_become_unreadable_inputs() -> None:
    records = [(Position(TOPIC, 1, 5), b"not avro"), (Position(TOPIC, 1, 6), None)]
    assert inputs(records, CODEC, FixedClock()) == [
        Unreadable(Position(TOPIC, 1, 5)),
        Unreadable(Position(TOPIC, 1, 6)),
    ]


class UnreachableAnnouncer(MemoryAnnouncer):
    """Kafka down: every announcement fails until `reachable` is set."""

    reachable = False

    def announce(self, published: PolicyPublished) -> None:
        if not self.reachable:
            raise KafkaConnectionError("broker down")
        super().announce(published)


def test_no_version_is_trained_past_one_that_could_not_be_announced(tmp_path: Path) -> None:
    announcer, store = UnreachableAnnouncer(), MemoryObjectStore()
    learner = make_learner(tmp_path, announcer, store)
    feed(learner, "g1", [1.0, 0.0], 0)
    feed(learner, "g2", [0.0, 1.0], 2)
    assert learner.state.version == 1  # g2 waits: version 1 is checkpointed but not announced
    assert [g.group_key for g in learner.state.ready] == ["g2"]
    announcer.reachable = True
    learner.announce_pending()
    learner.train_ready()
    assert [p.version for p in announcer.published] == [1, 2]
    assert learner.state.version == 2


def test_a_consumed_trajectory_is_a_learner_span_of_its_episode_under_the_senders_span(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-learner", SimpleSpanProcessor(exporter))
    learner = make_learner(tmp_path, MemoryAnnouncer(), MemoryObjectStore())
    trajectory = testing.group("g1", [1.0])[0]
    episode = trajectory.meta.episode_id
    sender = SpanRef(episode_trace_id(episode), 0xABC)  # the owner's span that published it
    record = Polled(
        Position(TOPIC, 3, 7), CODEC.encode(trajectory), ((TRACEPARENT, sender.traceparent().encode()),)
    )
    with tracing.installed(tracer):
        for event in inputs([record], CODEC, FixedClock()):
            learner.offer(event, record.headers)
    tracer.shutdown()
    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    assert span.name == "learner.consume" and context is not None and span.parent is not None
    assert context.trace_id == episode_trace_id(episode)
    assert span.parent.span_id == 0xABC
    attributes = dict(span.attributes or {})
    assert attributes["trialog.episode"] == episode and attributes["trialog.learner.version"] == 0
    assert attributes["messaging.kafka.offset"] == 7


def test_without_a_header_the_learner_span_hangs_under_the_episodes_root(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-learner", SimpleSpanProcessor(exporter))
    learner = make_learner(tmp_path, MemoryAnnouncer(), MemoryObjectStore())
    trajectory = testing.group("g1", [1.0])[0]
    with tracing.installed(tracer):
        for event in inputs([(Position(TOPIC, 0, 0), CODEC.encode(trajectory))], CODEC, FixedClock()):
            learner.offer(event)
    tracer.shutdown()
    (span,) = exporter.get_finished_spans()
    episode = trajectory.meta.episode_id
    assert span.parent is not None and span.parent.span_id == episode_root_span_id(episode)
    assert span.get_span_context() is not None
    assert span.get_span_context().trace_id == episode_trace_id(episode)


def test_a_training_step_is_a_span_of_its_own_linked_to_every_episode_it_trained_on(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-learner", SimpleSpanProcessor(exporter))
    learner = make_learner(tmp_path, MemoryAnnouncer(), MemoryObjectStore())
    with tracing.installed(tracer):
        feed(learner, "g1", [1.0, 0.0], 0)
    tracer.shutdown()
    [step] = [span for span in exporter.get_finished_spans() if span.name == "learner.step"]
    trained = json.loads((tmp_path / STATS_FILE).read_text().splitlines()[0])["episodes"]
    assert len(trained) == 2
    context = step.get_span_context()
    assert context is not None and step.parent is None  # a trace of its own ...
    ref = version_step_ref("run-test", 1)  # ... with ids anyone can derive from the run and the version
    assert (context.trace_id, context.span_id) == (ref.trace_id, ref.span_id)
    linked = {(link.context.trace_id, link.context.span_id) for link in step.links}
    assert linked == {(episode_trace_id(e), episode_root_span_id(e)) for e in trained}
    attributes = dict(step.attributes or {})
    assert attributes["trialog.policy_version"] == 1 and attributes["trialog.run"] == "run-test"
    assert attributes["trialog.learner.trajectories"] == 2 and "trialog.learner.loss" in attributes


def test_progress_without_a_step_is_checkpointed_and_not_read_again_after_a_restart(tmp_path: Path) -> None:
    announcer, store = MemoryAnnouncer(), MemoryObjectStore()
    first = make_learner(tmp_path, announcer, store)
    assert not first.save_progress()  # nothing taken in yet: no file
    assert checkpoint.load(tmp_path) is None
    feed(first, "g1", [1.0, 0.0], 0)  # version 1, checkpointed by its step
    assert not first.save_progress()  # the step's checkpoint holds this state already
    feed(first, "g2", [0.0, 0.0], 2)  # all equal: skipped, no step
    feed(first, "g3", [1.0], 4)  # half a group: waiting
    assert first.save_progress()
    weights = trainable_state(first.model)
    second = make_learner(tmp_path, announcer, store)
    assert second.resume()
    assert second.state.offsets == {(TOPIC, 0): 5} and second.state.version == 1
    assert second.state.counters.all_equal == 2 and second.state.waiting == 1
    assert second.published == announcer.published[0]
    assert all(torch.equal(t, trainable_state(second.model)[k]) for k, t in weights.items())
    feed(second, "g3", [1.0, 0.0], 4)  # g3's first member read again (at-least-once): a duplicate
    assert second.state.counters.duplicate == 1 and second.state.version == 2
    assert [p.version for p in announcer.published] == [1, 2]


class ListFeed:
    """Records on the first poll, then nothing; sets `stopping` once `polls` polls came back empty."""

    def __init__(self, records: list[Polled], stopping: threading.Event, polls: int) -> None:
        self.records, self.stopping, self.polls = records, stopping, polls

    def poll(self, timeout_ms: int) -> list[Polled]:
        out, self.records = self.records, []
        if not out:
            self.polls -= 1
            if self.polls <= 0:
                self.stopping.set()
        return out


def _polled(group_id: str, rewards: list[float], first_offset: int) -> list[Polled]:
    return [
        Polled(Position(TOPIC, 0, first_offset + i), CODEC.encode(t))
        for i, t in enumerate(testing.group(group_id, rewards))
    ]


def test_a_clean_stop_checkpoints_what_was_consumed_since_the_last_step(tmp_path: Path) -> None:
    learner = make_learner(tmp_path, MemoryAnnouncer(), MemoryObjectStore())
    stopping = threading.Event()
    records = _polled("g1", [1.0, 0.0], 0) + _polled("g2", [0.0, 0.0], 2)
    # An idle checkpoint only after an hour: only the clean stop writes g2's progress.
    run(
        learner,
        ListFeed(records, stopping, polls=1),
        FixedClock(),
        stopping,
        poll_ms=1,
        idle_checkpoint_s=3600,
    )
    saved = checkpoint.load(tmp_path)
    assert saved is not None and saved.version == 1
    assert saved.planner.offsets == {(TOPIC, 0): 4} and saved.planner.counters.all_equal == 2


def test_a_caught_up_learner_checkpoints_its_progress_while_it_runs(tmp_path: Path) -> None:
    learner = make_learner(tmp_path, MemoryAnnouncer(), MemoryObjectStore())
    stopping = threading.Event()
    written: list[int] = []

    class Watching(ListFeed):
        def poll(self, timeout_ms: int) -> list[Polled]:
            saved = checkpoint.load(tmp_path)
            written.append(-1 if saved is None else sum(saved.planner.offsets.values()))
            return super().poll(timeout_ms)

    records = _polled("g2", [0.0, 0.0], 0)  # no step: only an idle checkpoint records it
    run(learner, Watching(records, stopping, polls=2), FixedClock(), stopping, poll_ms=1, idle_checkpoint_s=0)
    assert written == [-1, -1, 2]  # the first poll that found nothing was followed by a checkpoint


def test_process_grades_shift_each_turns_advantage_by_the_coefficient_then_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    import learner.ranks as ranks_module  # where a one-process learner's step is trained
    from schemas.common import Verdict
    from schemas.progress import StepGraded

    announcer, store = MemoryAnnouncer(), MemoryObjectStore()
    learner = make_learner(tmp_path, announcer, store)
    learner.settings = dataclasses.replace(learner.settings, process_reward_coef=0.5)
    trained: list[list[float]] = []
    real = ranks_module.train_epochs

    def spy(model: object, optimizer: object, samples: list, *args: object) -> object:  # type: ignore[type-arg]
        trained.append([sample.advantage for sample in samples])
        return real(model, optimizer, samples, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ranks_module, "train_epochs", spy)
    first = testing.group("g1", [1.0, 0.0])[0]
    grades = [
        StepGraded(dataclasses.replace(first.meta, step=executed), Verdict.PARTIAL, passed, 4)
        for executed, passed in ((0, 1), (1, 3))
    ]
    other_run = StepGraded(dataclasses.replace(first.meta, run_id="run-other", step=0), Verdict.FAIL, 0, 4)
    learner.take_grades([*grades, other_run, "not a grade"])
    assert list(learner.grades) == ["g1/e0"] and len(learner.grades["g1/e0"]) == 2
    feed(learner, "g1", [1.0, 0.0], 0)
    [advantages] = trained
    # ls (executed: +0.5 pass rate, times 0.5) and submit for e0; the same for e1 with nothing graded.
    assert advantages == pytest.approx([1.0 + 0.25, 1.0, -1.0, -1.0], abs=1e-4)
    assert learner.grades == {}  # trained: spent
