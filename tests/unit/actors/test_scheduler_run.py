"""`trialog run`: the status fold, the worker command lines, the parser, and the scheduler loop on a fake."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import signal
import sys
import time
from pathlib import Path
from typing import Any

from actors.scheduler.core import Target
from actors.scheduler.status import RunStatus
from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
from learner.testing import trajectory
from ops.cli.run import register
from ops.paths import Paths
from ops.run_workers import Workers, worker_commands
from schemas.actions import Submit
from schemas.blobs import BlobRef
from schemas.codec import default_codec
from schemas.commands import StartEpisode
from schemas.common import EpisodeConfig, FailureClass, Producer, RecordMeta, Verdict
from schemas.events import EpisodeCompleted, EpisodeFailed, EpisodeStarted
from schemas.publications import TaskPublished
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from tests.unit.actors.requests import fixed_origin, request_meta

RUN = "run-test"


def _meta(episode: str, run: str = RUN) -> Any:
    return dataclasses.replace(request_meta(episode=episode), run_id=run)


def _command(episode: str, run: str = RUN) -> StartEpisode:
    meta = RecordMeta(f"cmd-{episode}", 1, Producer("scheduler", "s"))
    return StartEpisode(meta, run, episode, "task-1", "v1", 0, EpisodeConfig(8), "img", "g", 1)


def _started(episode: str) -> EpisodeStarted:
    return EpisodeStarted(_meta(episode), f"cmd-{episode}", EpisodeConfig(8), "img", "g", 1)


def test_the_status_counts_each_episode_once_by_outcome() -> None:
    status = RunStatus(RUN).observe_all(
        [
            *(_command(e) for e in ("e1", "e2", "e3", "e4")),
            *(_started(e) for e in ("e1", "e2", "e3")),
            EpisodeCompleted(_meta("e1"), 1.0, Verdict.PASS, 2, 10),
            TrajectoryCompleted(_meta("e1"), "g", "Fix.", (), 1.0, Verdict.PASS, 1, 1, 0, 0),
            TrajectoryCompleted(_meta("e1"), "g", "Fix.", (), 1.0, Verdict.PASS, 1, 1, 0, 0),  # again
            TrajectoryCompleted(_meta("e2"), "g", "Fix.", (), 0.3, Verdict.PARTIAL, 1, 2, 0, 0),
            EpisodeFailed(_meta("e3"), FailureClass.STEP_LIMIT, "long"),
            TrajectoryFailed(_meta("e3"), FailureClass.STEP_LIMIT, "long", ()),
            _command("x1", run="other"),
            EpisodeCompleted(_meta("x1", run="other"), 1.0, Verdict.PASS, 2, 10),
        ]
    )
    data = status.to_json()
    assert data == {
        "run": RUN,
        "commanded": 4,
        "started": 3,
        "completed": 2,
        "failed": 1,
        "failed_by_class": {"step_limit": 1},
        "in_flight": 1,
        "mean_reward": 0.65,
        "verdicts": {"partial": 1, "pass": 1},
        "sampled_tokens": 0,
        "trajectories": {"completed": 2, "failed": 1},
        "alerts": {"count": 0, "by_severity": {"critical": 0, "warning": 0, "info": 0}, "last": []},
        "guard": {
            "paused": False,
            "pause_reason": None,
            "pinned": False,
            "quarantine_rules": 0,
            "quarantined": 0,
            "version_changes": [],
        },
    }
    assert "failed 1 (step_limit 1), in flight 1, mean reward 0.650" in status.line()
    assert "alerts" not in status.line()
    assert status.guard_lines() == []  # no control log read: nothing to say
    assert RunStatus("empty").to_json()["mean_reward"] is None
    # each of this run's episodes is known by its sample, (task, seed); another run's is not
    assert status.drawn == {e: ("task-1", 1) for e in ("e1", "e2", "e3", "e4")}


def test_the_status_says_what_the_control_log_says() -> None:
    from tests.unit.actors.guard_records import IMAGE, changed, graded, paused, pinned, rule

    trajectories = [
        graded(TrajectoryCompleted(_meta(e), "g", "Fix.", (), 1.0, Verdict.PASS, 1, 1, 0, 0))
        for e in ("e1", "e2")
    ]
    status = RunStatus(RUN).observe_all(
        [
            pinned(),
            trajectories[0],
            rule("image", IMAGE),  # a rule matches trajectories before and after it
            trajectories[1],
            rule("verifier", "ff" * 32, rule_id="rule-2"),
            paused("canary c1 graded wrongly"),
            changed("image"),
            paused(run="other"),
        ]
    )
    guard = status.to_json()["guard"]
    assert guard["paused"] is True and guard["pause_reason"] == "canary c1 graded wrongly"
    assert (guard["pinned"], guard["quarantine_rules"], guard["quarantined"]) == (True, 2, 2)
    assert [c["component"] for c in guard["version_changes"]] == ["image"]
    [summary, change] = status.guard_lines()
    assert "PAUSED (canary c1 graded wrongly); pinned; 2 quarantine rules, 2 completed" in summary
    assert "1 version changes" in summary and change.startswith("  version changed: image sha256:")


def test_the_status_counts_alerts_by_severity_and_shows_the_last_few() -> None:
    from actors.guard.alerts import AlertEngine, AlertSettings
    from tests.unit.actors.test_alerts import RUN as ALERT_RUN
    from tests.unit.actors.test_alerts import T0, _origin, canary, dead_letter

    engine = AlertEngine(ALERT_RUN, AlertSettings(deadletter_quiet_s=1), _origin())
    alerts = engine.observe(canary(False))
    for i in range(7):  # a burst of dead letters each, 2 s apart
        engine.tick(T0 + i * 2_000_000 + 1_000_000)
        alerts += engine.observe(dead_letter(T0 + i * 2_000_000 + 2_000_000))
    status = RunStatus(ALERT_RUN).observe_all([*alerts, alerts[0]])  # a repeated alert is counted once
    data = status.to_json()["alerts"]
    assert data["count"] == 8 and data["by_severity"] == {"critical": 1, "warning": 7, "info": 0}
    assert [a["alert_id"] for a in data["last"]] == [a.alert_id for a in alerts[-5:]]
    line = status.line()
    assert "\nalerts: 8 (critical 1, warning 7); the last 5:\n" in line
    assert line.count("WARNING  dead_letters [reason=undecodable]") == 5
    assert RunStatus("other").observe_all(alerts).to_json()["alerts"]["count"] == 0


def test_spawned_workers_share_the_object_store_and_run_in_the_runs_groups(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home", tmp_path / "cache")
    tasks = [Path("examples/tasks/a"), Path("examples/tasks/b")]
    commands = worker_commands("r1", "127.0.0.1:1", "scripted", tasks, paths)
    assert sorted(commands) == ["guard", "rollout", "sandbox", "streams", "verifier"]
    unguarded = worker_commands("r1", "127.0.0.1:1", "scripted", tasks, paths, guard=False)
    assert sorted(unguarded) == ["rollout", "sandbox", "streams", "verifier"]
    for kind, argv in commands.items():
        assert argv[2:5] == ["ops.cli", "worker", kind]
        assert argv[argv.index("--run") + 1] == "r1" and argv[argv.index("--bootstrap") + 1] == "127.0.0.1:1"
        if kind not in ("streams", "guard"):
            assert argv[argv.index("--group") + 1] == f"r1.trialog-{kind}"
    for kind in ("sandbox", "verifier", "guard"):  # the guard stores its canaries' workspaces there
        assert commands[kind][commands[kind].index("--objects") + 1] == str(paths.objects)
    assert commands["rollout"][-4:] == ["--solutions", "examples/tasks/a", "--solutions", "examples/tasks/b"]
    assert commands["verifier"].count("--tasks") == commands["guard"].count("--tasks") == 2
    assert "--solutions" not in worker_commands("r1", "b", "random", tasks, paths)["rollout"]
    assert not any("--instance" in argv for argv in commands.values())  # each names itself host-pid


def test_a_worker_process_can_be_named_without_changing_its_command_line(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home", tmp_path / "cache")
    plain = worker_commands("r1", "b", "scripted", [Path("t")], paths)
    named = worker_commands("r1", "b", "scripted", [Path("t")], paths, instances={"sandbox": "r1-sandbox-2"})
    assert named["sandbox"] == [*plain["sandbox"], "--instance", "r1-sandbox-2"]
    assert {kind: named[kind] for kind in ("streams", "rollout", "verifier")} == {
        kind: plain[kind] for kind in ("streams", "rollout", "verifier")
    }


def test_the_run_commands_parse() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    start = parser.parse_args(
        [
            "run",
            "start",
            "--tasks",
            "a",
            "b",
            "--tasks",
            "c",
            "--episodes",
            "4",
            "--policy",
            "scripted",
            "--spawn",
        ]
    )
    assert start.tasks == [Path("a"), Path("b"), Path("c")] and start.spawn and start.capacity == 4
    status = parser.parse_args(["run", "status", "r1", "--json"])
    assert status.run == "r1" and status.json


class FakeConsumer:
    """Hands out queued records on poll; `commit` is counted."""

    def __init__(self) -> None:
        self.queue: list[Any] = []
        self.commits = 0

    def poll(self, timeout_ms: int) -> dict[str, list[Any]]:
        batch, self.queue = self.queue, []
        return {"tp": batch} if batch else {}

    def commit(self) -> None:
        self.commits += 1


class FakeProducer:
    def __init__(self, on_send: Any) -> None:
        self.sent: list[StartEpisode] = []
        self.on_send = on_send

    def send(self, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> Any:
        command = default_codec().decode(value)
        assert isinstance(command, StartEpisode) and key == command.episode_id.encode()
        assert headers == []  # tracing is off in unit tests: no traceparent
        self.sent.append(command)
        self.on_send(command)
        return self

    def get(self, timeout: float) -> None:
        return None


@dataclasses.dataclass
class _Record:
    value: bytes
    topic: str = "t"
    partition: int = 0
    offset: int = 0


def test_the_loop_keeps_capacity_and_exits_when_n_episodes_ended() -> None:
    target = Target(RUN, 5, capacity=2)
    process = SchedulerProcess(
        SchedulerSettings("unused", target), fixed_origin("scheduler"), say=lambda _: None
    )
    bundle = BlobRef(hashlib.sha256(b"x").hexdigest(), 1)
    meta = RecordMeta("pub", 1, Producer("tasks", "t"))
    process.observe(TaskPublished(meta, "task-1", "v1", "Fix.", "img", 30.0, "pytest", None, (), bundle))
    consumer = FakeConsumer()
    in_flight: list[int] = []

    def on_send(command: StartEpisode) -> None:
        in_flight.append(process.state.in_flight + 1)
        # The episode ends right away: its trajectory arrives on the next poll.
        trajectory = TrajectoryCompleted(
            _meta(command.episode_id), "g", "Fix.", (), 1.0, Verdict.PASS, 1, 1, 0, 0
        )
        consumer.queue.append(_Record(default_codec().encode(trajectory)))

    producer = FakeProducer(on_send)
    assert process._loop(consumer, producer) == 0
    assert len(producer.sent) == 5 and max(in_flight) == 2 and process.sent == 5
    assert consumer.commits >= 1


def test_workers_stop_on_sigterm_and_are_killed_past_the_grace(tmp_path: Path) -> None:
    polite = [sys.executable, "-c", "import time; time.sleep(60)"]
    stubborn = [
        sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(60)",
    ]  # fmt: skip
    workers = Workers(tmp_path / "logs")
    workers.start({"polite": polite, "stubborn": stubborn})
    give_up = time.monotonic() + 20
    while "ready" not in (tmp_path / "logs" / "stubborn.log").read_text() and time.monotonic() < give_up:
        time.sleep(0.05)
    assert workers.dead() == {}
    codes = workers.stop(grace_s=1.0)
    assert codes == {"polite": -signal.SIGTERM, "stubborn": -signal.SIGKILL}
    assert set(workers.dead()) == {"polite", "stubborn"}


def test_a_killed_worker_is_no_longer_watched_and_starts_again_on_the_same_log(tmp_path: Path) -> None:
    sleeper = [sys.executable, "-c", "print('up', flush=True); import time; time.sleep(60)"]
    log = tmp_path / "logs" / "learner.log"

    def wait_for_lines(count: int) -> None:
        give_up = time.monotonic() + 60
        while log.read_text().count("up") < count and time.monotonic() < give_up:
            time.sleep(0.05)

    workers = Workers(tmp_path / "logs")
    workers.start({"learner": sleeper, "other": sleeper})
    first = workers.processes["learner"]
    wait_for_lines(1)
    assert workers.kill("learner") == -signal.SIGKILL and first.poll() == -signal.SIGKILL
    assert workers.dead() == {} and "learner" not in workers.processes  # a kill is not a crash of the run
    workers.start({"learner": sleeper})
    wait_for_lines(2)
    assert log.read_text().count("up") == 2  # appended, not truncated
    assert workers.processes["learner"] is not first and workers.dead() == {}
    assert set(workers.stop(grace_s=5.0)) == {"learner", "other"}


def test_the_loop_sends_nothing_while_paused_says_so_once_and_goes_on_when_resumed() -> None:
    from tests.unit.actors.guard_records import paused, resumed

    said: list[str] = []
    process = SchedulerProcess(
        SchedulerSettings("unused", Target(RUN, 2)), fixed_origin("scheduler"), said.append
    )
    bundle = BlobRef(hashlib.sha256(b"x").hexdigest(), 1)
    meta = RecordMeta("pub", 1, Producer("tasks", "t"))
    process.observe(TaskPublished(meta, "task-1", "v1", "Fix.", "img", 30.0, "pytest", None, (), bundle))
    process.observe(paused("canary c1 graded wrongly", run=RUN))

    class Consumer(FakeConsumer):
        polls = 0

        def poll(self, timeout_ms: int) -> dict[str, list[Any]]:
            self.polls += 1
            if self.polls == 3:  # an operator resumes the run while the scheduler waits
                self.queue.append(_Record(default_codec().encode(resumed("fixed", run=RUN))))
            return super().poll(timeout_ms)

    consumer = Consumer()

    def on_send(command: StartEpisode) -> None:
        assert consumer.polls >= 3  # nothing before the resume
        trajectory = TrajectoryCompleted(
            _meta(command.episode_id), "g", "Fix.", (), 1.0, Verdict.PASS, 1, 1, 0, 0
        )
        consumer.queue.append(_Record(default_codec().encode(trajectory)))

    assert process._loop(consumer, FakeProducer(on_send)) == 0
    notices = [line for line in said if "paused" in line or "resumed" in line]
    assert notices == [
        f"scheduler {RUN}: paused: canary c1 graded wrongly; resume with trialog run resume {RUN}",
        f"scheduler {RUN}: resumed: fixed; starting episodes again",
    ]
    assert process.sent == 2


def test_the_spawned_guard_reads_the_spawned_sandbox_workers_metrics(tmp_path: Path) -> None:
    from ops.telemetry.config import TelemetryConfig

    paths = Paths(tmp_path / "home", tmp_path / "cache")
    telemetry = TelemetryConfig("trialog-scheduler", None, 9500)
    commands = worker_commands("r1", "b", "scripted", [Path("t")], paths, telemetry=telemetry)
    sandbox = commands["sandbox"]
    port = sandbox[sandbox.index("--metrics-port") + 1]
    guard = commands["guard"]
    assert guard[guard.index("--sandbox-metrics") + 1] == f"http://127.0.0.1:{port}/metrics"
    quiet = worker_commands("r1", "b", "scripted", [Path("t")], paths, telemetry=TelemetryConfig("s"))
    assert "--sandbox-metrics" not in quiet["guard"]


def test_sampled_tokens_count_each_trajectory_once() -> None:
    one = trajectory(run_id=RUN, episode_id="e1")
    two = trajectory(run_id=RUN, episode_id="e2", actions=(Submit(),))
    tokens = sum(len(step.action.token_ids) for t in (one, two) for step in t.steps)
    status = RunStatus(RUN).observe_all([one, one, two])  # a redelivered trajectory is not counted again
    assert tokens > 0
    assert status.to_json()["sampled_tokens"] == tokens
