"""Upcasters: what a reader does to old records when Avro schema resolution alone is not enough.

Decoding resolves a record written with version N straight to today's reader schema (fields added since
get their defaults). Then, for each version step N -> N+1 that registered an upcaster, the upcaster fixes
what a default cannot know. Upcasters run on plain record dicts already in today's shape, one version
step each, oldest first; they must be pure and total (any v_N record in, a valid record out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

AvroDict = dict[str, Any]
Upcaster = Callable[[AvroDict], AvroDict]

SIGKILL_EXIT = 137  # 128 + SIGKILL, what a shell reports for a process the kernel's OOM killer ended


def step_executed_v1_to_v2(rec: AvroDict) -> AvroDict:
    """v2 added `oom_killed` (default false). v1 sandboxes could only report an OOM kill as exit code 137
    without a timeout, so that is what v1 records mean; the default would claim no OOM ever happened."""
    rec["oom_killed"] = rec["exit_code"] == SIGKILL_EXIT and not rec["timed_out"]
    return rec


def reward_assigned_v3_to_v4(rec: AvroDict) -> AvroDict:
    """v4 split the reward into the outcome rule's share and weighted components (default 0.0 and {}).
    Before v4 a reward was the outcome rule alone: the default 0.0 would claim every old grade's outcome
    was nothing."""
    rec["outcome_reward"] = rec["reward"]
    return rec


def episode_snapshot_v4_to_v5(rec: AvroDict) -> AvroDict:
    """v5 embeds RewardAssigned v4: the state's reward, when it has one, gets the same upcast."""
    if rec.get("reward") is not None:
        rec["reward"] = reward_assigned_v3_to_v4(rec["reward"])
    return rec


UPCASTERS: Mapping[tuple[str, int], Upcaster] = {
    ("trialog.episode.StepExecuted", 1): step_executed_v1_to_v2,
    ("trialog.episode.RewardAssigned", 3): reward_assigned_v3_to_v4,
    ("trialog.episode.EpisodeSnapshot", 4): episode_snapshot_v4_to_v5,
}
"""(schema full name, from version) -> upcaster to from_version + 1."""


def upcast_chain(
    name: str, written: int, current: int, registry: Mapping[tuple[str, int], Upcaster] = UPCASTERS
) -> tuple[Upcaster, ...]:
    """The upcasters a record of `name` written at version `written` goes through to reach `current`."""
    return tuple(registry[(name, v)] for v in range(written, current) if (name, v) in registry)
