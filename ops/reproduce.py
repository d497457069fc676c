"""`trialog reproduce EPISODE --run RUN`: run an episode's recorded actions again and compare, step by step.

From the log alone: `EpisodeStarted` gives the image, the task's initial snapshot (the restore point of
step 0) and the episode's limits (per-step wall time, output cap); the run's `TaskPublished` gives the
sandbox quotas. A fresh sandbox restores the initial snapshot, then each recorded action that the run
executed is executed again, exactly as a sandbox worker does it (`sandbox_agent.actions.invocation_for`,
a snapshot after each step). Each step's observation (exit code, timed out, killed for memory, the
bounded stdout and stderr) and snapshot id are compared with the recorded `StepExecuted`; then the
reproduced final workspace is graded with the task's frozen tests in another fresh sandbox and compared
with the recorded `RewardAssigned`. The report names the first divergent step and why.

Timings are not compared (they never repeat). The comparison is pure (`compare_observations`); running
goes through the `StepRunner` protocol.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from actors.verifier.grading import Grader
from actors.verifier.tasks import TaskSource, TaskUnavailable
from ops.recheck import REWARD_TOLERANCE
from ops.replay import describe_action
from ops.runlog import EpisodeLog, LoggedRun
from sandbox_agent.backend import SandboxBackend
from sandbox_agent.limits import ExecLimits, Quotas, SandboxSpec
from sandbox_agent.results import StepResult
from schemas.actions import InvalidReply, SandboxAction, Submit
from schemas.blobs import ObjectStore
from schemas.budget import fit_text, inline_output_bytes, stream_limit
from schemas.events import StepExecuted
from schemas.requests import ResourceLimits

EXCERPT_CHARS = 60


@dataclass(frozen=True)
class Observation:
    exit_code: int
    timed_out: bool
    oom_killed: bool
    stdout: str
    stderr: str
    snapshot_id: str | None

    @classmethod
    def recorded(cls, event: StepExecuted) -> Observation:
        return cls(
            event.exit_code, event.timed_out, event.oom_killed, event.stdout.text, event.stderr.text,
            event.meta.snapshot_id,
        )  # fmt: skip

    @classmethod
    def reproduced(cls, step: StepResult, inline_limit: int) -> Observation:
        """What the log would hold: each stream fitted to the step's inline limit, as the owner fits it."""
        result = step.result
        return cls(
            result.exit_code,
            result.timed_out,
            result.oom_killed,
            fit_text(result.stdout, inline_limit),
            fit_text(result.stderr, inline_limit),
            step.snapshot_id,
        )


def _text_difference(name: str, recorded: str, reproduced: str) -> str:
    at = next(
        (i for i, (a, b) in enumerate(zip(recorded, reproduced, strict=False)) if a != b),
        min(len(recorded), len(reproduced)),
    )
    return (
        f"{name} differs from character {at}: recorded {recorded[at : at + EXCERPT_CHARS]!r}, "
        f"reproduced {reproduced[at : at + EXCERPT_CHARS]!r}"
    )


def compare_observations(recorded: Observation, reproduced: Observation) -> list[str]:
    """Why the reproduced observation is not the recorded one (empty: the same)."""
    why: list[str] = []
    for name in ("exit_code", "timed_out", "oom_killed"):
        was, now = getattr(recorded, name), getattr(reproduced, name)
        if was != now:
            why.append(f"{name.replace('_', ' ')}: recorded {was}, reproduced {now}")
    for name in ("stdout", "stderr"):
        was, now = getattr(recorded, name), getattr(reproduced, name)
        if was != now:
            why.append(_text_difference(name, was, now))
    if recorded.snapshot_id != reproduced.snapshot_id:
        why.append(
            f"snapshot id: recorded {recorded.snapshot_id}, reproduced {reproduced.snapshot_id} "
            "(the workspace after the step differs)"
        )
    return why


@dataclass(frozen=True)
class StepCheck:
    step: int
    action: str
    recorded: Observation | None = None  # None: a submit, or a step the run never executed
    reproduced: Observation | None = None
    why: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "action": self.action,
            "same": not self.why,
            "why": list(self.why),
            "recorded": asdict(self.recorded) if self.recorded is not None else None,
            "reproduced": asdict(self.reproduced) if self.reproduced is not None else None,
        }


@dataclass(frozen=True)
class RewardCheck:
    recorded: float
    recorded_verdict: str
    reproduced: float | None
    reproduced_verdict: str | None
    snapshot_id: str | None
    why: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reproduction:
    episode: str
    task_id: str
    task_version: str
    steps: tuple[StepCheck, ...] = ()
    reward: RewardCheck | None = None
    error: str = ""

    @property
    def first_divergence(self) -> StepCheck | None:
        return next((check for check in self.steps if check.why), None)

    @property
    def same(self) -> bool:
        return not self.error and self.first_divergence is None and not (self.reward and self.reward.why)

    def verdict(self) -> str:
        if self.error:
            return f"could not reproduce: {self.error}"
        first = self.first_divergence
        if first is not None:
            return f"diverges at step {first.step} ({first.action}): {'; '.join(first.why)}"
        if self.reward is not None and self.reward.why:
            return f"the final reward diverges: {'; '.join(self.reward.why)}"
        return "reproduced: every observation, snapshot and the reward match the log"

    def to_json(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "episode": self.episode,
            "task_id": self.task_id,
            "task_version": self.task_version,
            "same": self.same,
            "verdict": self.verdict(),
            "first_divergent_step": first.step if first is not None else None,
            "steps": [check.to_json() for check in self.steps],
            "reward": asdict(self.reward) if self.reward is not None else None,
            "error": self.error,
        }

    def table(self) -> str:
        lines = [f"episode {self.episode}  task {self.task_id}@{self.task_version[:12]}"]
        for check in self.steps:
            mark = "same" if not check.why else "DIVERGES"
            if check.recorded is None and check.reproduced is None:
                mark = "-"
            lines.append(f"  step {check.step:>3}  {mark:<8}  {check.action}")
            lines.extend(f"              {why}" for why in check.why)
        if self.reward is not None:
            reward = self.reward
            mark = "same" if not reward.why else "DIVERGES"
            lines.append(
                f"  reward    {mark:<8}  recorded {reward.recorded:g} ({reward.recorded_verdict}), "
                f"reproduced {_maybe(reward.reproduced)} ({reward.reproduced_verdict})"
            )
            lines.extend(f"              {why}" for why in reward.why)
        lines.append(self.verdict())
        return "\n".join(lines)


def _maybe(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


StepFn = Callable[[SandboxAction, ExecLimits], StepResult]
"""Runs one action with the step's limits (its inline output shrinks as the episode's budget is spent)."""


class StepRunner(Protocol):
    def session(
        self, spec: SandboxSpec, snapshot_id: str | None, limits: ExecLimits
    ) -> AbstractContextManager[StepFn]:
        """A fresh sandbox holding `snapshot_id`; the function runs one action in it and snapshots."""
        ...


def reproduce(
    run: LoggedRun,
    episode: EpisodeLog,
    tasks: TaskSource,
    runner: StepRunner,
    grader: Grader,
    *,
    on_step: Callable[[str], None] | None = None,
) -> Reproduction:
    """Re-execute `episode`'s recorded actions and compare (see the module's docstring)."""
    task_id, task_version = episode.task or ("", "")
    base = Reproduction(episode.episode_id, task_id, task_version)
    started = episode.started
    if started is None:
        return _failed(base, "the log holds no EpisodeStarted for this episode (read it from the beginning)")
    published = run.tasks.get((task_id, task_version))
    limits = (published.limits if published is not None else None) or ResourceLimits()
    spec = SandboxSpec(started.image, Quotas.from_resource_limits(limits))
    exec_limits = ExecLimits(started.config.sandbox_timeout_s, started.config.output_limit_bytes)
    results = {event.meta.step: event for event in episode.executions}

    def inline_limit(step: int) -> int:  # the owner's `step_output_limit` from the recorded steps before
        used = inline_output_bytes(
            output for event in episode.executions if event.meta.step < step
            for output in (event.stdout, event.stderr)
        )  # fmt: skip
        return stream_limit(started.config.output_limit_bytes, used)

    checks: list[StepCheck] = []
    final = started.meta.snapshot_id
    with runner.session(spec, started.meta.snapshot_id, exec_limits) as execute:
        for proposed in episode.actions:
            step, action = proposed.meta.step, proposed.action
            recorded = results.get(step)
            if isinstance(action, (Submit, InvalidReply)) or recorded is None:  # nothing was executed
                checks.append(StepCheck(step, describe_action(action)))
                continue
            limit = inline_limit(step)
            again = Observation.reproduced(execute(action, replace(exec_limits, output_bytes=limit)), limit)
            was = Observation.recorded(recorded)
            checks.append(
                StepCheck(step, describe_action(action), was, again, tuple(compare_observations(was, again)))
            )
            final = again.snapshot_id
            if on_step is not None:
                on_step(f"step {step}")
    reproduction = Reproduction(episode.episode_id, task_id, task_version, tuple(checks))
    if episode.reward is None:
        return reproduction
    return _with_reward(reproduction, episode, tasks, grader, final, started.image)


def _with_reward(
    reproduction: Reproduction,
    episode: EpisodeLog,
    tasks: TaskSource,
    grader: Grader,
    final: str | None,
    image: str,
) -> Reproduction:
    recorded = episode.reward
    assert recorded is not None
    check = RewardCheck(recorded.reward, recorded.verdict.value, None, None, final)
    if final is None:
        return replace(reproduction, reward=replace(check, why=("no final workspace to grade",)))
    try:
        task = tasks.get(reproduction.task_id, reproduction.task_version)
        grade = grader(task, final, image or None).grade
    except TaskUnavailable as exc:
        return replace(reproduction, error=f"{exc.reason}: {exc.detail}")
    except Exception as exc:  # an infrastructure failure while grading is reported, not raised
        return replace(reproduction, error=f"grading failed: {type(exc).__name__}: {exc}")
    if not grade.trainable:
        return replace(reproduction, error=f"grading failed: {grade.detail}")
    why = []
    if not math.isclose(grade.reward, recorded.reward, rel_tol=0.0, abs_tol=REWARD_TOLERANCE):
        why.append(f"reward: recorded {recorded.reward:g}, reproduced {grade.reward:g}")
    if grade.verdict.value != recorded.verdict.value:
        why.append(f"verdict: recorded {recorded.verdict.value}, reproduced {grade.verdict.value}")
    check = RewardCheck(
        recorded.reward, recorded.verdict.value, grade.reward, grade.verdict.value, final, tuple(why)
    )
    return replace(reproduction, reward=check)


def _failed(base: Reproduction, error: str) -> Reproduction:
    return replace(base, error=error)


class SandboxSteps:
    """A `StepRunner` on a sandbox backend: one fresh sandbox per session, destroyed afterwards."""

    def __init__(self, backend: SandboxBackend, objects: ObjectStore) -> None:
        self.backend = backend
        self.objects = objects

    @contextmanager
    def session(self, spec: SandboxSpec, snapshot_id: str | None, limits: ExecLimits) -> Iterator[StepFn]:
        from sandbox_agent.actions import invocation_for
        from sandbox_agent.manifest import SnapshotId

        sandbox = self.backend.create(spec)
        try:
            if snapshot_id is not None:
                self.backend.restore(sandbox, SnapshotId.parse(snapshot_id))

            def execute(action: SandboxAction, step_limits: ExecLimits) -> StepResult:
                invocation = invocation_for(action, self.objects)
                result = self.backend.exec(
                    sandbox, invocation.argv, limits=step_limits, stdin=invocation.stdin
                )
                return StepResult(result, str(self.backend.snapshot(sandbox)))

            yield execute
        finally:
            self.backend.destroy(sandbox)


def reproduce_in_sandboxes(
    run: LoggedRun,
    episode: EpisodeLog,
    objects: ObjectStore,
    *,
    fallback: TaskSource | None = None,
    quiet: bool = False,
) -> Reproduction:
    """`reproduce` in fresh Docker sandboxes of the local stack, reading `objects` and writing nothing to
    it; a progress bar (steps, then the grading) on a terminal unless `quiet`."""
    from actors.verifier.grading import SnapshotGrader
    from ops.audit_sandboxes import OverlayStore, audit_backend, default_image
    from ops.bundled_tasks import BundledTasks
    from ops.progress import ProgressBar

    store = OverlayStore(objects)
    executed = len(episode.executions)
    with (
        tempfile.TemporaryDirectory(prefix="trialog-reproduce-") as scratch,
        audit_backend(store) as backend,
        ProgressBar(executed + 1, f"reproduce {episode.episode_id}", quiet=quiet) as bar,
    ):
        tasks = BundledTasks(run.tasks, objects, Path(scratch), fallback)
        grader = _advancing(SnapshotGrader(backend, store, default_image()), bar.advance)
        return reproduce(run, episode, tasks, SandboxSteps(backend, store), grader, on_step=bar.advance)


def _advancing(grader: Grader, advance: Callable[[str], None]) -> Grader:
    def grade(task: Any, snapshot_id: str, image: str | None) -> Any:
        try:
            return grader(task, snapshot_id, image)
        finally:
            advance("graded")

    return grade
