"""The owner decides today exactly what it decided when the golden decisions were committed
(`tests/golden/owner_decisions.py`; regenerate with `python -m tests.golden.owner_decisions`)."""

from __future__ import annotations

import json

import pytest

from tests.golden.owner_decisions import SCRIPTS, decisions, path_of


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_owner_decides_as_committed_byte_for_byte(name: str) -> None:
    committed = path_of(name).read_text()
    assert decisions(name) == committed, f"regenerate with python -m tests.golden.owner_decisions {name}"


def test_the_golden_decisions_cover_starts_answers_duplicates_timeouts_and_failures() -> None:
    seen: dict[str, set[str]] = {"inputs": set(), "rejected": set(), "events": set(), "trajectories": set()}
    for name in SCRIPTS:
        for step in json.loads(path_of(name).read_text())["steps"]:
            effects = step["effects"]
            seen["inputs"].add(step["input"]["type"])
            seen["rejected"].add(str(effects["rejected"]))
            seen["events"].update(e["type"] for e in effects["events"])
            if effects["trajectory"] is not None:
                seen["trajectories"].add(effects["trajectory"]["type"])
    assert seen["inputs"] >= {"StartEpisode", "AbortEpisode", "ActionProposed", "StepExecuted",
                              "RewardAssigned", "EpisodeFailed", "Tick"}  # fmt: skip
    assert seen["rejected"] >= {"None", "duplicate", "stale_attempt", "ended"}
    assert seen["events"] >= {"EpisodeStarted", "EpisodeCompleted", "EpisodeFailed", "RewardAssigned"}
    assert seen["trajectories"] == {"TrajectoryCompleted", "TrajectoryFailed"}
