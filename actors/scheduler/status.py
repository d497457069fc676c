"""A run's status, folded from its topics: `episode.commands`, `episode.events`, the trajectories and the
run's control log (`run.control`: paused or not, pinned or not, quarantine rules, version changes)
and its alerts (counted by severity, the last few shown).

Pure (`RunStatus.observe` takes decoded records, in any order, duplicates included, except that control
records fold in their log order); `read_status` reads the topics of a run from the beginning to their
current end (a run older than `run.control` reads without it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from actors.guard import control as run_control
from actors.guard.alerts import alert_json, alert_line, by_severity
from schemas.alerts import Alert
from schemas.commands import StartEpisode
from schemas.events import EpisodeCompleted, EpisodeFailed, EpisodeStarted
from schemas.run_control import CONTROL_TYPES
from schemas.topics import (
    ALERTS,
    EPISODE_COMMANDS,
    EPISODE_EVENTS,
    RUN_CONTROL,
    TRAJECTORIES_COMPLETED,
    TRAJECTORIES_FAILED,
)
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

STATUS_TOPICS = (
    EPISODE_COMMANDS,
    EPISODE_EVENTS,
    TRAJECTORIES_COMPLETED,
    TRAJECTORIES_FAILED,
    ALERTS,
    RUN_CONTROL,
)
LAST_ALERTS = 5  # shown by `run status`; `trialog alerts RUN` lists them all


@dataclass
class RunStatus:
    run_id: str
    commanded: set[str] = field(default_factory=set)  # StartEpisode sent
    # episode -> (task id, sampling seed), from its StartEpisode: what pairs an evaluation's episodes
    # with another version's on the same samples
    drawn: dict[str, tuple[str, int]] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)  # EpisodeStarted logged
    completed: dict[str, tuple[float, str]] = field(default_factory=dict)  # episode -> (reward, verdict)
    failed: dict[str, str] = field(default_factory=dict)  # episode -> failure class
    published_completed: set[str] = field(default_factory=set)  # on trajectories.completed
    published_failed: set[str] = field(default_factory=set)  # on trajectories.failed
    control: run_control.ControlState | None = None
    # The completed trajectories without their steps: matched against the quarantine rules at the end (a
    # rule may come after the trajectories it names).
    graded: dict[str, TrajectoryCompleted] = field(default_factory=dict)
    alerts: dict[str, Alert] = field(default_factory=dict)  # alert id -> alert, in the order written
    # The policy's response tokens in the completed trajectories (each counted once): what generation
    # throughput is measured by.
    sampled_tokens: int = 0

    def observe(self, value: object) -> None:
        """Fold one decoded record; records of other runs and other types are ignored."""
        if isinstance(value, CONTROL_TYPES):
            self.control = run_control.apply(self.control or run_control.ControlState(self.run_id), value)
            return
        if isinstance(value, StartEpisode):
            if value.run_id == self.run_id:
                self.commanded.add(value.episode_id)
                self.drawn.setdefault(value.episode_id, (value.task_id, value.seed))
            return
        if isinstance(value, Alert):
            if value.run_id == self.run_id:
                self.alerts.setdefault(value.alert_id, value)
            return
        meta = getattr(value, "meta", None)
        if getattr(meta, "run_id", None) != self.run_id:
            return
        episode: str = meta.episode_id  # type: ignore[union-attr]
        if isinstance(value, EpisodeStarted):
            self.started.add(episode)
        elif isinstance(value, EpisodeCompleted):
            self.completed[episode] = (value.reward, value.verdict.value)
        elif isinstance(value, EpisodeFailed):
            self.failed[episode] = value.failure.value
        elif isinstance(value, TrajectoryCompleted):
            self.published_completed.add(episode)
            self.completed.setdefault(episode, (value.reward, value.verdict.value))
            if episode not in self.graded:
                self.sampled_tokens += sum(len(step.action.token_ids) for step in value.steps)
                self.graded[episode] = dataclasses.replace(value, steps=())
        elif isinstance(value, TrajectoryFailed):
            self.published_failed.add(episode)
            self.failed.setdefault(episode, value.failure.value)

    def observe_all(self, values: Iterable[object]) -> RunStatus:
        for value in values:
            self.observe(value)
        return self

    @property
    def in_flight(self) -> set[str]:
        return (self.commanded | self.started) - set(self.completed) - set(self.failed)

    @property
    def quarantined(self) -> int:
        """Completed trajectories a quarantine rule matches."""
        control = self.control
        if control is None or not control.rules:
            return 0
        return sum(1 for t in self.graded.values() if control.quarantine_rule(t) is not None)

    def guard_json(self) -> dict[str, Any]:
        control = self.control or run_control.ControlState(self.run_id)
        shown = control.to_json()
        return {
            "paused": control.is_paused,
            "pause_reason": shown["paused"],
            "pinned": control.pinned is not None,
            "quarantine_rules": len(control.rules),
            "quarantined": self.quarantined,
            "version_changes": shown["version_changes"],
        }

    @property
    def mean_reward(self) -> float | None:
        rewards = [reward for reward, _verdict in self.completed.values()]
        return sum(rewards) / len(rewards) if rewards else None

    @property
    def last_alerts(self) -> list[Alert]:
        return list(self.alerts.values())[-LAST_ALERTS:]

    def to_json(self) -> dict[str, Any]:
        by_class: dict[str, int] = {}
        for failure in self.failed.values():
            by_class[failure] = by_class.get(failure, 0) + 1
        verdicts: dict[str, int] = {}
        for _reward, verdict in self.completed.values():
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
        return {
            "run": self.run_id,
            "commanded": len(self.commanded),
            "started": len(self.started),
            "completed": len(self.completed),
            "failed": len(self.failed),
            "failed_by_class": dict(sorted(by_class.items())),
            "in_flight": len(self.in_flight),
            "mean_reward": self.mean_reward,
            "verdicts": dict(sorted(verdicts.items())),
            "sampled_tokens": self.sampled_tokens,
            "trajectories": {
                "completed": len(self.published_completed),
                "failed": len(self.published_failed),
            },
            "alerts": {
                "count": len(self.alerts),
                "by_severity": by_severity(list(self.alerts.values())),
                "last": [alert_json(alert) for alert in self.last_alerts],
            },
            "guard": self.guard_json(),
        }

    def line(self) -> str:
        data = self.to_json()
        failed = ", ".join(f"{name} {count}" for name, count in data["failed_by_class"].items())
        mean = "-" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        return (
            f"run {self.run_id or '(default)'}: started {data['started']} (commanded {data['commanded']}), "
            f"completed {data['completed']}, failed {data['failed']}{f' ({failed})' if failed else ''}, "
            f"in flight {data['in_flight']}, mean reward {mean}{self._alerts_line()}"
        )

    def guard_lines(self) -> list[str]:
        """What the run's control log says, for `run status` (nothing for a run without one)."""
        if self.control is None:
            return []
        guard = self.guard_json()
        paused = f"PAUSED ({guard['pause_reason']})" if guard["paused"] else "not paused"
        pinned = "pinned" if guard["pinned"] else "not pinned"
        lines = [
            f"  {paused}; {pinned}; {guard['quarantine_rules']} quarantine rules, {guard['quarantined']} "
            f"completed trajectories quarantined; {len(guard['version_changes'])} version changes"
        ]
        for change in guard["version_changes"]:
            task = f" (task {change['task']})" if change["task"] else ""
            was, seen = change["pinned"][:19], change["seen"][:19]
            lines.append(f"  version changed: {change['component']}{task} {was} -> {seen}")
        return lines

    def _alerts_line(self) -> str:
        """Nothing without alerts; else their counts by severity, then the last few, one per line."""
        if not self.alerts:
            return ""
        counts = by_severity(list(self.alerts.values()))
        shown = ", ".join(f"{severity} {count}" for severity, count in counts.items() if count)
        lines = [f"\nalerts: {len(self.alerts)} ({shown}); the last {len(self.last_alerts)}:"]
        lines += [f"  {alert_line(alert)}" for alert in self.last_alerts]
        return "\n".join(lines)


def read_status(bootstrap: str, run: str) -> RunStatus:
    from streams.kafka.reader import decoded, read_records
    from streams.kafka.topics import existing_topics

    # A run made before a topic joined the catalogue (its alerts) lacks it: read the rest.
    names = [topic.of(run) for topic in STATUS_TOPICS]
    present = existing_topics(bootstrap, names)
    topics = [name for name in names if name in present] or names
    return RunStatus(run).observe_all(value for _topic, value in decoded(read_records(bootstrap, topics)))
