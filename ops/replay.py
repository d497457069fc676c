"""An episode's timeline from its logged events, pure (`trialog replay`; reading Kafka is `ops.cli.replay`).

One line per step: the action the policy proposed (with its policy version and sampling latency), the
observation the sandbox recorded (exit code, the bounded output, timed out or killed for memory), the
snapshot taken after it and the sandbox's own time, and at the submit step the reward with its verdict.
Times are the events' `occurred_at_us` (taken once, at the source), shown as offsets from the episode's
first event. A log read from a point in time (`--from`) may hold only the end of an episode: its timeline
is `partial` (no EpisodeStarted) and shows the steps that were read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from schemas.actions import Action, ApplyPatch, InvalidReply, RunCommand, WriteFile
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeEvent,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
)


def describe_action(action: Action) -> str:
    """A one-line summary of an action (commands in full; file and patch contents by size)."""
    if isinstance(action, RunCommand):
        return f"run: {action.command}"
    if isinstance(action, WriteFile):
        content = action.content
        size = len(content) if isinstance(content, bytes) else content.size
        return f"write_file {action.path} ({size} bytes)"
    if isinstance(action, ApplyPatch):
        diff = action.diff
        if isinstance(diff, str):
            files = sum(1 for line in diff.splitlines() if line.startswith("+++ "))
            return f"apply_patch ({files} files, {len(diff.splitlines())} lines)"
        return f"apply_patch ({diff.size} bytes, in the object store)"
    if isinstance(action, InvalidReply):
        return f"invalid reply (not executed): {action.error}"
    return f"submit{': ' + action.message if action.message else ''}"


def bounded(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


@dataclass(frozen=True)
class StepLine:
    step: int
    action: str
    policy_version: int
    attempt: int
    proposed_at_us: int
    policy_latency_us: int
    exit_code: int | None = None
    timed_out: bool = False
    oom_killed: bool = False
    stdout: str = ""
    stderr: str = ""
    output_truncated: bool = False
    snapshot_id: str | None = None
    executed_at_us: int | None = None
    sandbox_us: int | None = None
    reward: float | None = None
    verdict: str | None = None
    graded_at_us: int | None = None

    @property
    def submitted(self) -> bool:
        return self.action.startswith("submit")


@dataclass(frozen=True)
class EpisodeTimeline:
    episode_id: str
    run_id: str
    task_id: str
    task_version: str
    first_us: int
    outcome: str  # completed | failed | in_flight
    steps: tuple[StepLine, ...] = ()
    partial: bool = False
    reward: float | None = None
    verdict: str | None = None
    failure: str | None = None
    reason: str = ""
    duration_us: int = 0
    initial_snapshot_id: str | None = None
    image: str = ""
    events: int = 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["started_at"] = iso_time(self.first_us)
        return out


@dataclass
class _Builder:
    first_us: int
    steps: dict[int, StepLine] = field(default_factory=dict)

    def proposed(self, event: ActionProposed) -> None:
        meta = event.meta
        self.steps[meta.step] = StepLine(
            step=meta.step,
            action=describe_action(event.action),
            policy_version=meta.policy_version,
            attempt=meta.attempt,
            proposed_at_us=meta.occurred_at_us - self.first_us,
            policy_latency_us=event.latency_us,
        )

    def executed(self, event: StepExecuted) -> None:
        line = self.steps.get(event.meta.step) or _orphan(event.meta.step, event.meta.policy_version)
        self.steps[event.meta.step] = replace(
            line,
            exit_code=event.exit_code,
            timed_out=event.timed_out,
            oom_killed=event.oom_killed,
            stdout=event.stdout.text,
            stderr=event.stderr.text,
            output_truncated=event.stdout.truncated or event.stderr.truncated,
            snapshot_id=event.meta.snapshot_id,
            executed_at_us=event.meta.occurred_at_us - self.first_us,
            sandbox_us=event.duration_us,
        )

    def rewarded(self, event: RewardAssigned) -> None:
        line = self.steps.get(event.meta.step) or _orphan(event.meta.step, event.meta.policy_version)
        self.steps[event.meta.step] = replace(
            line,
            reward=event.reward,
            verdict=event.verdict.value,
            snapshot_id=event.meta.snapshot_id,
            graded_at_us=event.meta.occurred_at_us - self.first_us,
        )


def _orphan(step: int, policy_version: int) -> StepLine:
    """A step whose ActionProposed was not read (a log read from a later time)."""
    return StepLine(step, "(action not read)", policy_version, 0, 0, 0)


def build_timeline(episode_id: str, events: Sequence[EpisodeEvent], output_chars: int) -> EpisodeTimeline:
    """The timeline of one episode's events (in log order)."""
    if not events:
        return EpisodeTimeline(episode_id, "", "", "", 0, "in_flight", partial=True)
    first = events[0].meta
    builder = _Builder(min(event.meta.occurred_at_us for event in events))
    timeline = EpisodeTimeline(
        episode_id, first.run_id, first.task_id, first.task_version, builder.first_us, "in_flight",
        partial=not isinstance(events[0], EpisodeStarted), events=len(events),
    )  # fmt: skip
    for event in events:
        if isinstance(event, EpisodeStarted):
            timeline = replace(timeline, initial_snapshot_id=event.meta.snapshot_id, image=event.image)
        elif isinstance(event, ActionProposed):
            builder.proposed(event)
        elif isinstance(event, StepExecuted):
            builder.executed(event)
        elif isinstance(event, RewardAssigned):
            builder.rewarded(event)
        elif isinstance(event, EpisodeCompleted):
            timeline = replace(
                timeline,
                outcome="completed",
                reward=event.reward,
                verdict=event.verdict.value,
                duration_us=event.duration_us,
            )
        elif isinstance(event, EpisodeFailed):
            timeline = replace(
                timeline,
                outcome="failed",
                failure=event.failure.value,
                reason=event.reason,
                duration_us=event.meta.occurred_at_us - builder.first_us,
            )
    steps = tuple(
        replace(line, stdout=bounded(line.stdout, output_chars), stderr=bounded(line.stderr, output_chars))
        for _, line in sorted(builder.steps.items())
    )
    return replace(timeline, steps=steps)


def iso_time(us: int) -> str:
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text: str) -> int:
    """Milliseconds since the epoch from an ISO 8601 time (UTC unless it says otherwise) or epoch seconds."""
    try:
        return round(float(text) * 1000)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        hint = "ISO 8601, e.g. 2026-11-30T17:05:00Z, or epoch seconds"
        raise ValueError(f"not a time: {text!r} ({hint})") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def _seconds(us: int | None) -> str:
    return "-" if us is None else f"{us / 1e6:.2f} s"


def render(timeline: EpisodeTimeline) -> str:
    """The human form of a timeline."""
    head = (
        f"episode {timeline.episode_id}  task {timeline.task_id}@{timeline.task_version[:12]}  "
        f"run {timeline.run_id or '(default)'}  first event {iso_time(timeline.first_us)}"
    )
    if timeline.outcome == "completed":
        end = (
            f"completed: reward {timeline.reward:g} ({timeline.verdict}) in {_seconds(timeline.duration_us)}"
        )
    elif timeline.outcome == "failed":
        end = f"failed: {timeline.failure} ({timeline.reason}) after {_seconds(timeline.duration_us)}"
    else:
        end = "in flight (not ended in the log read)"
    lines = [head, f"  {end}, {len(timeline.steps)} steps, {timeline.events} events"]
    if timeline.partial:
        lines.append("  partial: the log read starts after this episode started")
    if timeline.initial_snapshot_id:
        lines.append(f"  initial snapshot {timeline.initial_snapshot_id}  image {timeline.image}")
    for line in timeline.steps:
        lines.extend(_render_step(line))
    return "\n".join(lines)


def _render_step(line: StepLine) -> list[str]:
    out = [
        f"  step {line.step:>3}  +{line.proposed_at_us / 1e6:7.2f} s  v{line.policy_version}  "
        f"attempt {line.attempt}  {line.action}  (policy {_seconds(line.policy_latency_us)})"
    ]
    pad = " " * 12
    if line.exit_code is not None:
        flags = "".join(
            f", {name}" for name, on in (("timed out", line.timed_out), ("oom killed", line.oom_killed)) if on
        )
        out.append(
            f"{pad}exit {line.exit_code}{flags} in {_seconds(line.sandbox_us)} at "
            f"+{(line.executed_at_us or 0) / 1e6:.2f} s  snapshot {line.snapshot_id}"
        )
        for name, text in (("stdout", line.stdout), ("stderr", line.stderr)):
            if text:
                shown = text.rstrip("\n").replace("\n", "\n" + pad + "  | ")
                out.append(f"{pad}{name}: | {shown}")
        if line.output_truncated:
            out.append(f"{pad}(the recorded output was cut at the episode's output limit)")
    if line.reward is not None:
        out.append(
            f"{pad}reward {line.reward:g} ({line.verdict}) at +{(line.graded_at_us or 0) / 1e6:.2f} s, "
            f"graded snapshot {line.snapshot_id}"
        )
    return out
