"""Scripted workers and a driver for the episode owner: deterministic inputs, every effect recorded."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

from schemas.actions import Action, RunCommand
from schemas.commands import AbortEpisode, StartEpisode
from schemas.common import EpisodeConfig, FailureClass, Output, Producer, RecordMeta, Verdict
from schemas.events import ActionProposed, EpisodeFailed, RewardAssigned, StepExecuted
from schemas.origin import FixedClock, Origin, SequentialIds
from schemas.requests import PolicyRequest, ResourceLimits, SandboxRequest, VerifyRequest
from streams.owner import (
    Answer,
    Appended,
    Effects,
    OwnerState,
    Request,
    TaskInfo,
    on_abort,
    on_action,
    on_executed,
    on_reward,
    on_sandbox_failed,
    on_start,
    on_tick,
)

T0 = 1_700_000_000_000_000
VERSION = hashlib.sha256(b"task-hello").hexdigest()
TASK = TaskInfo(
    "task-hello", VERSION, "print hello", "trialog/task-hello:1", 30.0, ResourceLimits(), "snap-init"
)
CONFIG = EpisodeConfig(
    max_steps=4, max_attempts=3, policy_timeout_s=10.0, sandbox_timeout_s=5.0, verify_timeout_s=20.0
)
EPISODE = "ep-0001"
LS = RunCommand("ls")


def owner_origin() -> Origin:
    return Origin(Producer("streams", "streams-0"), FixedClock(T0), SequentialIds("own"))


def start_command(config: EpisodeConfig = CONFIG, task_version: str = VERSION) -> StartEpisode:
    meta = RecordMeta("cmd-0001", T0, Producer("scheduler", "scheduler-0"))
    return StartEpisode(
        meta, "run-test", EPISODE, "task-hello", task_version, 3, config, TASK.image, "g-1", 7
    )


def abort_command(reason: str = "operator") -> AbortEpisode:
    return AbortEpisode(RecordMeta("cmd-0002", T0, Producer("ops", "ops-0")), "run-test", EPISODE, reason)


@dataclass
class Workers:
    """Stateless workers answering requests the way the real ones do (`Origin.reply_meta`)."""

    rollout: Origin = field(default_factory=lambda: _worker("rollout"))
    sandbox: Origin = field(default_factory=lambda: _worker("sandbox"))
    verifier: Origin = field(default_factory=lambda: _worker("verifier"))

    def act(self, request: Request, action: Action = LS, policy_version: int = 3) -> ActionProposed:
        assert isinstance(request, PolicyRequest)
        meta = dataclasses.replace(self.rollout.reply_meta(request.meta), policy_version=policy_version)
        return ActionProposed(meta, action, repr(action), 10, (1, 2), (-0.5, -0.25), 1_000)

    def execute(self, request: Request) -> StepExecuted:
        assert isinstance(request, SandboxRequest)
        snapshot = f"snap-{request.meta.step}-{request.meta.attempt}"
        meta = dataclasses.replace(self.sandbox.reply_meta(request.meta), snapshot_id=snapshot)
        return StepExecuted(meta, 0, Output("ok\n"), Output(""), False, 2_000)

    def fail(self, request: Request, failure: FailureClass, reason: str = "lost") -> EpisodeFailed:
        """A sandbox worker's failure answer: the request's header echoed, no new snapshot."""
        assert isinstance(request, SandboxRequest)
        return EpisodeFailed(self.sandbox.reply_meta(request.meta), failure, reason)

    def grade(self, request: Request, reward: float = 1.0) -> RewardAssigned:
        assert isinstance(request, VerifyRequest)
        meta = self.verifier.reply_meta(request.meta)
        return RewardAssigned(meta, reward, Verdict.PASS, 3, 3, (), (), "verifier-1")


def _worker(kind: str) -> Origin:
    return Origin(Producer(kind, f"{kind}-0"), FixedClock(T0 + 500), SequentialIds(kind))


@dataclass(frozen=True)
class Tick:
    now_us: int


Input = StartEpisode | AbortEpisode | ActionProposed | StepExecuted | RewardAssigned | EpisodeFailed | Tick


def feed(
    state: OwnerState, item: Input, origin: Origin, now_us: int, task: TaskInfo | None = TASK
) -> Effects:
    """What the streams worker does per input: route it to its decision function."""
    if isinstance(item, StartEpisode):
        return on_start(state, item, task, origin=origin, now_us=now_us)
    if isinstance(item, AbortEpisode):
        return on_abort(state, item, origin=origin, now_us=now_us)
    if isinstance(item, Tick):
        return on_tick(state, origin=origin, now_us=item.now_us)
    if isinstance(item, EpisodeFailed):
        return on_sandbox_failed(state, item, origin=origin, now_us=now_us)
    answer: Answer = item
    if isinstance(answer, ActionProposed):
        return on_action(state, answer, origin=origin, now_us=now_us)
    if isinstance(answer, StepExecuted):
        return on_executed(state, answer, origin=origin, now_us=now_us)
    return on_reward(state, answer, origin=origin, now_us=now_us)


@dataclass
class Driver:
    """An owner fed one input at a time; keeps everything it emitted."""

    state: OwnerState = field(default_factory=lambda: OwnerState.new(EPISODE))
    origin: Origin = field(default_factory=owner_origin)
    now_us: int = T0
    effects: list[Effects] = field(default_factory=list)

    def feed(self, item: Input, *, at_us: int | None = None, task: TaskInfo | None = TASK) -> Effects:
        self.now_us = item.now_us if isinstance(item, Tick) else (at_us or self.now_us + 1_000)
        out = feed(self.state, item, self.origin, self.now_us, task)
        self.state = out.state
        self.effects.append(out)
        return out

    @property
    def appended(self) -> list[Appended]:
        return [event for out in self.effects for event in out.events]

    @property
    def last_request(self) -> Request:
        return next(r for out in reversed(self.effects) for r in reversed(out.requests))
