"""Guarding a run (issue 15) on real Kafka and Docker: a real run with its guard, canaries and a learner;
then its verifier swapped mid-run for a broken one.

One run, in phases (each a test below reads what its phase recorded):

1. **Honest graders.** The run's canaries are graded for `HONEST_ROUNDS` rounds: no alert, no pause, and the
   grader is vouched for (a `GraderCleared`), so the learner trains on (or skips, by its usual rules) what
   it was holding.
2. **A verifier that passes everything** replaces the honest one (`--fault pass-all`: another verifier
   version). Within `ROUNDS_TO_CATCH` canary rounds graded by it, a must-not-pass canary is graded as a
   pass: the guard alerts, pauses the scheduler and quarantines what that version graded; no episode starts
   after the pause; the learner never trains on one of its trajectories and counts them quarantined.
3. **An operator resumes** (`trialog run resume`) with a verifier that **fails everything**: the
   reference-solution canary catches it in turn, and the run pauses again.

The timings (first broken grade to pause; the canaries' share of grading) are printed for BENCHMARKS.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest
from kafka import KafkaConsumer, TopicPartition

from actors.guard import control
from actors.guard.core import MAX_OUTSTANDING
from actors.tasks.publish import publish_tasks
from learner import checkpoint
from learner import testing as learner_testing
from ops.paths import REPO_ROOT, Paths
from ops.run_pin import image_version, pin_run
from ops.stack import docker_engine
from ops.stack.images import sandbox_ref
from schemas import topics
from schemas.alerts import Alert
from schemas.blobs import LocalObjectStore
from schemas.canaries import CanaryGraded
from schemas.codec import DecodeError, default_codec
from schemas.commands import StartEpisode
from schemas.events import RewardAssigned
from schemas.run_control import (
    GraderCleared,
    GuardSettings,
    RunPaused,
    RunResumed,
    TrajectoriesQuarantined,
)
from schemas.topics import topic_name
from schemas.trajectories import TrajectoryCompleted
from streams.kafka.topics import ensure_topics
from tests.integration.fault_helpers import Cluster, wait_for

pytestmark = pytest.mark.integration

TASKS = REPO_ROOT / "examples" / "tasks"
EXAMPLES = (TASKS / "easy-fix-add", TASKS / "easy-fix-is-even")
# Fast rounds for a test (one canary every 4 s), with the whole grading capacity allowed: the default
# (3 a minute, at most 5 % of grading) would make each phase minutes long.
GUARD = GuardSettings(
    canaries_per_minute=15.0, max_canary_share=1.0, pause_on_canary_failure=True, hold_for_clearance=True
)
HONEST_ROUNDS = 6
# Rounds alternate must-pass and must-not-pass cases: whichever a broken grader gets wrong, one of any two
# rounds in a row is of that kind. The canaries still outstanding when it starts (at most MAX_OUTSTANDING,
# graded in any order across the topic's partitions) come first: its first wrong grade is among its first
# MAX_OUTSTANDING + 2 canaries.
ROUNDS_TO_CATCH = MAX_OUTSTANDING + 2
PHASE_TIMEOUT_S = 240.0
PAUSE_GRACE_US = 5_000_000  # a StartEpisode sent before the scheduler read the pause


@dataclass
class RunLog:
    """The run's topics read from the beginning, decoded, by base name (`poll` reads what is new)."""

    bootstrap: str
    run: str
    records: dict[str, list[object]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        self.names = {topic_name(self.run, t.name): t.name for t in topics.TOPICS}
        partitions = [
            TopicPartition(name, p)
            for name in self.names
            for p in sorted(self.consumer.partitions_for_topic(name) or {0})
        ]
        self.consumer.assign(partitions)
        self.consumer.seek_to_beginning(*partitions)

    def poll(self) -> RunLog:
        for batch in self.consumer.poll(timeout_ms=500).values():
            for record in batch:
                if record.value is None:
                    continue
                try:
                    value = default_codec().decode(record.value)
                except DecodeError:
                    continue
                self.records.setdefault(self.names[record.topic], []).append(value)
        return self

    def of(self, base: str, kind: type) -> list:  # type: ignore[type-arg]
        return [v for v in self.records.get(base, []) if isinstance(v, kind)]

    def control(self) -> control.ControlState:
        return control.fold(self.run, self.records.get(topics.RUN_CONTROL.name, []))

    def close(self) -> None:
        self.consumer.close()


@dataclass
class Phases:
    """What each phase saw (filled by the `guarded_run` fixture)."""

    honest_verifier: str = ""
    broken: dict[str, str] = field(default_factory=dict)  # fault -> its verifier version
    log: RunLog | None = None
    learner_dir: Path | None = None
    notes: dict[str, float] = field(default_factory=dict)
    honest_alerts: list[Alert] = field(default_factory=list)
    honest_cleared: list[GraderCleared] = field(default_factory=list)
    honest_canaries: list[CanaryGraded] = field(default_factory=list)
    pauses: list[RunPaused] = field(default_factory=list)


def _learner_argv(run: str, bootstrap: str, model: Path, folder: Path, objects: Path) -> list[str]:
    return [
        sys.executable, "-m", "ops.cli", "worker", "learner", "--run", run, "--bootstrap", bootstrap,
        "--model", str(model), "--group-size", "2", "--group-timeout-s", "30", "--max-staleness", "1000",
        "--lora-rank", "4", "--threads", "1", "--prompt-encoder", "bytes", "--idle-checkpoint-s", "2",
        "--checkpoint-dir", str(folder), "--objects", str(objects),
    ]  # fmt: skip


def _graded_by(log: RunLog, version: str) -> list[RewardAssigned]:
    grades = log.of("verify.results", RewardAssigned) + log.of("canary.results", RewardAssigned)
    return [g for g in grades if g.versions is not None and g.versions.verifier == version]


def _swap_verifier(cluster: Cluster, log: RunLog, fault: str, phases: Phases) -> tuple[str, float]:
    """Replace the verifier by one injecting `fault`; its version and the time of its first grade."""
    known = {phases.honest_verifier, *phases.broken.values()}
    cluster.kill("verifier")
    cluster.start("verifier", [*cluster.argv("verifier"), "--fault", fault])

    def new_versions() -> set[str]:
        log.poll()
        grades = log.of("verify.results", RewardAssigned) + log.of("canary.results", RewardAssigned)
        return {g.versions.verifier for g in grades if g.versions is not None} - known

    wait_for(f"a grade by the {fault} verifier", lambda: bool(new_versions()), PHASE_TIMEOUT_S)
    [version] = new_versions()
    phases.broken[fault] = version
    first = min(g.meta.occurred_at_us for g in _graded_by(log, version))
    return version, first


def _wait_paused(log: RunLog, after: int, what: str) -> RunPaused:
    def paused() -> bool:
        log.poll()
        return any(p.meta.occurred_at_us > after for p in log.of("run.control", RunPaused))

    wait_for(what, paused, PHASE_TIMEOUT_S)
    return next(p for p in log.of("run.control", RunPaused) if p.meta.occurred_at_us > after)


def _wait_drained(log: RunLog, paused: RunPaused) -> None:
    """Every episode commanded before the pause has its trajectory (completed or failed)."""

    def drained() -> bool:
        log.poll()
        commanded = {c.episode_id for c in log.of("episode.commands", StartEpisode)
                     if c.meta.occurred_at_us <= paused.meta.occurred_at_us + PAUSE_GRACE_US}  # fmt: skip
        ended = {t.meta.episode_id for base in ("trajectories.completed", "trajectories.failed")
                 for t in log.records.get(base, [])}  # fmt: skip
        return commanded <= ended

    wait_for("the episodes in flight at the pause to end", drained, PHASE_TIMEOUT_S)


@pytest.fixture(scope="module")
def guarded_run(
    kafka_bootstrap: str, docker_client: docker.DockerClient, stack_paths: Paths,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Phases]:  # fmt: skip
    tmp_path = tmp_path_factory.mktemp("guard")
    run = f"grd{uuid.uuid4().hex[:8]}"
    paths = Paths(tmp_path / "home", stack_paths.cache)
    ensure_topics(kafka_bootstrap, run)
    image = str(sandbox_ref())
    publish_tasks(list(EXAMPLES), kafka_bootstrap, LocalObjectStore(paths.objects), image, run=run)
    engine = docker_engine.require(stack_paths)
    pin = pin_run(kafka_bootstrap, run, EXAMPLES, image_version(engine, image), GUARD)
    actions = tmp_path / "actions.json"
    actions.write_text(json.dumps({
        folder.name: [
            {"tool": "apply_patch", "diff": (folder / "solution.patch").read_text(encoding="utf-8")},
            {"tool": "submit"},
        ] for folder in EXAMPLES
    }))  # fmt: skip
    model = tmp_path / "model"
    learner_testing.tiny_llama().save_pretrained(model)
    cluster = Cluster(run, kafka_bootstrap, tmp_path, EXAMPLES, actions, paths)
    phases = Phases(honest_verifier=pin.verifier, learner_dir=tmp_path / "learner")
    log = RunLog(kafka_bootstrap, run)
    phases.log = log
    learner_log = tmp_path / "logs" / "learner.log"
    learner_log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with learner_log.open("ab") as out:
        learner = subprocess.Popen(
            _learner_argv(run, kafka_bootstrap, model, tmp_path / "learner", paths.objects),
            cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        for kind in ("streams", "sandbox", "rollout", "verifier", "guard"):
            cluster.start(kind)
        cluster.start_scheduler(episodes=400, capacity=2)

        # 1. Honest graders: HONEST_ROUNDS canaries graded, the grader vouched for.
        def honest_rounds() -> bool:
            log.poll()
            return len(log.of("canary.grades", CanaryGraded)) >= HONEST_ROUNDS and bool(
                log.of("run.control", GraderCleared)
            )

        wait_for(f"{HONEST_ROUNDS} honest canary rounds", honest_rounds, PHASE_TIMEOUT_S)
        phases.notes["honest_phase_s"] = time.monotonic() - started
        phases.honest_alerts = list(log.of("alerts", Alert))
        phases.honest_cleared = list(log.of("run.control", GraderCleared))
        phases.honest_canaries = list(log.of("canary.grades", CanaryGraded))
        phases.pauses = list(log.of("run.control", RunPaused))

        # 2. A verifier that passes everything.
        _broken, first_us = _swap_verifier(cluster, log, "pass-all", phases)
        paused = _wait_paused(log, first_us, "a pause after the pass-all verifier's first grade")
        phases.notes["pass_all_first_grade_to_pause_s"] = (paused.meta.occurred_at_us - first_us) / 1e6
        phases.notes["pass_all_paused_at_us"] = paused.meta.occurred_at_us
        # Episodes in flight at the pause end (graded by the broken verifier) before the run resumes.
        _wait_drained(log, paused)
        # 3. Resumed with a verifier that fails everything.
        resumed_at = time.time_ns() // 1000
        subprocess.run(
            [sys.executable, "-m", "ops.cli", "run", "resume", run, "--reason", "verifier replaced",
             "--bootstrap", kafka_bootstrap], cwd=REPO_ROOT, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        _failing, first_fail_us = _swap_verifier(cluster, log, "fail-all", phases)
        again = _wait_paused(log, max(first_fail_us, resumed_at), "a pause after the fail-all verifier")
        phases.notes["fail_all_first_grade_to_pause_s"] = (again.meta.occurred_at_us - first_fail_us) / 1e6
        _wait_drained(log, again)
        grades = log.of("verify.results", RewardAssigned) + log.of("canary.results", RewardAssigned)
        canary_us = sum(g.duration_us for g in log.of("canary.results", RewardAssigned))
        all_us = sum(g.duration_us for g in grades)
        phases.notes["canary_share_of_grading_time"] = canary_us / max(all_us, 1)
        phases.notes["run_s"] = time.monotonic() - started
        print("guard timings:", json.dumps(phases.notes, indent=2))
        yield phases
    finally:
        learner.terminate()
        try:
            learner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            learner.kill()
        cluster.stop()
        log.close()
        keep = Path("/tmp") / "trialog-guard-logs" / run
        if (tmp_path / "logs").exists():
            shutil.copytree(tmp_path / "logs", keep, dirs_exist_ok=True)
        for container in docker_client.containers.list(all=True, filters={"label": "dev.trialog.worker"}):
            if container.labels.get("dev.trialog.worker", "").startswith(run):
                container.remove(force=True)


def test_honest_graders_raise_no_alert_in_n_canary_rounds(guarded_run: Phases) -> None:
    assert len(guarded_run.honest_canaries) >= HONEST_ROUNDS
    wrong = [c for c in guarded_run.honest_canaries if not c.ok]
    assert wrong == []
    assert {c.expect_pass for c in guarded_run.honest_canaries} == {True, False}
    assert guarded_run.honest_alerts == [] and guarded_run.pauses == []
    assert {c.verifier for c in guarded_run.honest_cleared} == {guarded_run.honest_verifier}


@pytest.mark.parametrize("fault", ["pass-all", "fail-all"])
def test_a_broken_verifier_is_caught_paused_and_quarantined_and_never_trained_on(
    guarded_run: Phases, fault: str
) -> None:
    log = guarded_run.log
    assert log is not None
    broken = guarded_run.broken[fault]
    assert broken and broken != guarded_run.honest_verifier
    canaries = sorted(
        (c for c in log.of("canary.grades", CanaryGraded) if c.versions and c.versions.verifier == broken),
        key=lambda c: c.graded_at_us,
    )
    wrong = [i for i, c in enumerate(canaries) if not c.ok]
    assert wrong and wrong[0] < ROUNDS_TO_CATCH, [(c.case, c.ok) for c in canaries]
    alerts = [a for a in log.of("alerts", Alert) if a.rule == "canary_failed"]
    assert any(a.labels.get("verifier") == broken for a in alerts)
    state = log.control()
    rules = [r for r in log.of("run.control", TrajectoriesQuarantined) if r.value == broken]
    assert rules, state.rules
    graded = [
        t for t in log.of("trajectories.completed", TrajectoryCompleted)
        if t.grade_versions is not None and t.grade_versions.verifier == broken
    ]  # fmt: skip
    assert all(state.quarantine_rule(t) is not None for t in graded)
    # No episode started after the pause (beyond one sent before the scheduler read it).
    paused = next(p for p in log.of("run.control", RunPaused) if p.alert_id in {a.alert_id for a in alerts})
    commands = log.of("episode.commands", StartEpisode)
    resumed = [r.meta.occurred_at_us for r in log.of("run.control", RunResumed)]
    window_end = min([t for t in resumed if t > paused.meta.occurred_at_us], default=2**63)
    since = paused.meta.occurred_at_us + PAUSE_GRACE_US
    late = [c for c in commands if since < c.meta.occurred_at_us < window_end]
    assert late == []
    # The learner never trained on a trajectory that version graded; it counted them quarantined.
    folder = guarded_run.learner_dir
    assert folder is not None and graded
    every_broken = {
        t.meta.episode_id for t in log.of("trajectories.completed", TrajectoryCompleted)
        if t.grade_versions is not None and t.grade_versions.verifier in guarded_run.broken.values()
    }  # fmt: skip

    def counted() -> bool:
        # At least one quarantined, never all: on a loaded machine a broken-graded trajectory can still
        # be held for clearance, or its group dropped at its timeout, when this looks (seen in CI at
        # 74c82cb: 8 of them quarantined, the rest held). Whatever its count, none is trained (below).
        saved = checkpoint.load(folder)
        return saved is not None and saved.planner.counters.quarantined >= min(1, len(every_broken))

    wait_for("the learner counting broken-graded trajectories quarantined", counted, 120)
    stats = folder / "stats.jsonl"
    trained = [json.loads(line) for line in stats.read_text().splitlines()] if stats.exists() else []
    trained_episodes = {e for line in trained for e in line.get("episodes", [])}
    assert not trained_episodes & {t.meta.episode_id for t in graded}
