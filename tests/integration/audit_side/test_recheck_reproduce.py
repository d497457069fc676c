"""Replay, `audit --recheck` and `reproduce` on a real run, and on forged copies of it.

The honest run rechecks with no difference and reproduces with no divergence. A copy whose reward was
forged (in RewardAssigned, EpisodeCompleted and TrajectoryCompleted alike, chains re-linked: the plain
audit is healthy) is caught by the recheck; a copy whose observation was altered is caught by reproduce,
at the altered step. Everything is read from the log and the run's object store only.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from ops.cli.main import main as trialog
from schemas.common import Output, Verdict
from schemas.events import EpisodeCompleted, RewardAssigned, StepExecuted
from schemas.trajectories import TrajectoryCompleted
from tests.integration.audit_side.conftest import EPISODES, RealRun
from tests.integration.audit_side.forging import forge, read_all

CapSys = pytest.CaptureFixture[str]


def _command(name: str) -> Callable[[list[str]], int]:
    """`trialog NAME ARGV...` in this process."""
    return lambda argv: trialog([name, *argv])


def _json(main: Any, argv: list[str], capsys: CapSys) -> tuple[int, dict[str, Any]]:
    code = main(argv)
    captured = capsys.readouterr()
    assert captured.out.strip(), captured.err
    return code, json.loads(captured.out)


def _episodes(real_run: RealRun, capsys: CapSys, *extra: str) -> list[dict[str, Any]]:
    code, out = _json(_command("replay"), [real_run.name, "--json", *real_run.options()[:2], *extra], capsys)
    assert code == 0
    episodes: list[dict[str, Any]] = out["episodes"]
    return episodes


def test_replay_prints_each_step_and_seeks_by_time(real_run: RealRun, capsys: CapSys) -> None:
    episodes = _episodes(real_run, capsys)
    assert len(episodes) == EPISODES
    for episode in episodes:
        assert episode["outcome"] == "completed" and episode["reward"] == 1.0 and not episode["partial"]
        patch, submit = episode["steps"]
        assert patch["action"].startswith("apply_patch") and patch["exit_code"] == 0
        assert patch["snapshot_id"].startswith("snap-") and patch["sandbox_us"] > 0
        assert submit["action"] == "submit" and submit["reward"] == 1.0 and submit["verdict"] == "pass"
        assert submit["snapshot_id"] == patch["snapshot_id"]
    first_ms = min(e["first_us"] for e in episodes) // 1000
    last_event_s = max(e["first_us"] + e["duration_us"] for e in episodes) / 1e6
    assert len(_episodes(real_run, capsys, "--from", str((first_ms - 1000) / 1000))) == EPISODES
    assert _episodes(real_run, capsys, "--from", str(last_event_s + 30)) == []
    one = episodes[0]["episode_id"]
    assert [e["episode_id"] for e in _episodes(real_run, capsys, "--episode", one)] == [one]


def test_the_human_forms_name_steps_and_verdicts(real_run: RealRun, capsys: CapSys) -> None:
    assert trialog(["replay", real_run.name, *real_run.options()[:2]]) == 0
    text = capsys.readouterr().out
    assert text.count("completed: reward 1 (pass)") == EPISODES and "apply_patch" in text
    assert "reward 1 (pass) at +" in text and "snapshot snap-" in text


def test_an_honest_run_rechecks_without_difference_and_reproduces(real_run: RealRun, capsys: CapSys) -> None:
    started = time.monotonic()
    code, report = _json(
        _command("audit"), [real_run.name, "--json", "--recheck", *real_run.options()], capsys
    )
    with capsys.disabled():
        print(f"audit --recheck of {EPISODES} episodes: {time.monotonic() - started:.1f} s")
    assert report["healthy"] is True, report
    assert report["recheck"]["rechecked"] == EPISODES and report["recheck"]["differences"] == 0, report
    assert report["recheck"]["ok"] is True and code == 0
    episode = _episodes(real_run, capsys)[0]["episode_id"]
    argv = [episode, "--run", real_run.name, "--json", *real_run.options()]
    started = time.monotonic()
    code, reproduced = _json(_command("reproduce"), argv, capsys)
    with capsys.disabled():
        print(f"reproduce of one 2-step episode: {time.monotonic() - started:.1f} s")
    assert reproduced["same"] is True and code == 0, reproduced
    assert reproduced["first_divergent_step"] is None
    assert reproduced["steps"][0]["same"] and reproduced["steps"][0]["reproduced"]["exit_code"] == 0
    assert reproduced["reward"]["reproduced"] == 1.0 and reproduced["reward"]["why"] == []


def test_a_forged_reward_is_found_by_the_recheck(real_run: RealRun, capsys: CapSys) -> None:
    records = read_all(real_run.bootstrap, real_run.name)
    victim = next(r.key for r in records if r.topic == "episode.events").decode()  # type: ignore[union-attr]

    def forged(obj: Any) -> Any:
        if obj.meta.episode_id != victim:
            return obj
        if isinstance(obj, RewardAssigned):
            return dataclasses.replace(obj, reward=0.3, verdict=Verdict.PARTIAL, passed=1)
        if isinstance(obj, (EpisodeCompleted, TrajectoryCompleted)):
            return dataclasses.replace(obj, reward=0.3, verdict=Verdict.PARTIAL)
        return obj

    run = forge(real_run.bootstrap, real_run.name, forged)
    code, plain = _json(_command("audit"), [run, "--json", *real_run.options()], capsys)
    assert code == 0 and plain["healthy"] is True and plain["completed"] == EPISODES  # chains re-linked
    code, report = _json(_command("audit"), [run, "--json", "--recheck", *real_run.options()], capsys)
    assert code == 1 and report["healthy"] is True
    recheck = report["recheck"]
    assert recheck["rechecked"] == EPISODES and recheck["episodes_differing"] == 1 and recheck["errors"] == 0
    (found,) = recheck["episodes"]
    assert found["episode"] == victim and found["regraded"]["reward"] == 1.0
    rewards = {(d["source"], d["recorded"]) for d in found["differences"] if d["field"] == "reward"}
    assert rewards == {("RewardAssigned", 0.3), ("EpisodeCompleted", 0.3), ("TrajectoryCompleted", 0.3)}


def test_an_altered_observation_is_named_by_reproduce_at_its_step(real_run: RealRun, capsys: CapSys) -> None:
    records = read_all(real_run.bootstrap, real_run.name)
    victim = next(r.key for r in records if r.topic == "episode.events").decode()  # type: ignore[union-attr]

    def altered(obj: Any) -> Any:
        if isinstance(obj, StepExecuted) and obj.meta.episode_id == victim and obj.meta.step == 0:
            return dataclasses.replace(obj, stdout=Output("Applied patch calc.py cleanly.\nall good\n"))
        return obj

    run = forge(real_run.bootstrap, real_run.name, altered)
    code, plain = _json(_command("audit"), [run, "--json", *real_run.options()], capsys)
    assert code == 0 and plain["healthy"] is True
    code, reproduced = _json(
        _command("reproduce"), [victim, "--run", run, "--json", *real_run.options()], capsys
    )
    assert code == 1 and reproduced["same"] is False, reproduced
    assert reproduced["first_divergent_step"] == 0
    assert reproduced["verdict"].startswith("diverges at step 0 (apply_patch"), reproduced["verdict"]
    (why,) = reproduced["steps"][0]["why"]
    assert why.startswith("stdout differs from character")
    assert reproduced["reward"]["why"] == []  # the workspace itself was not changed: the reward still holds
