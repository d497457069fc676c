from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from actors.scheduler.status import RunStatus
from ops.cli.demo import register, settings_from_args
from ops.demo.summary import DemoSummary, Training, evaluation


def _status(run: str, completed: dict[str, tuple[float, str]], failed: dict[str, str]) -> RunStatus:
    status = RunStatus(run)
    status.completed.update(completed)
    status.failed.update(failed)
    return status


def _training(versions: list[int]) -> Training:
    return Training("d-train", 60.0, 10, 6, 3, {"step_limit": 4}, versions, 12)


def test_an_evaluation_counts_every_asked_episode_and_failures_as_misses() -> None:
    status = _status(
        "d-eval", {"a": (1.0, "pass"), "b": (0.5, "partial"), "c": (0.0, "fail")}, {"d": "step_limit"}
    )
    result = evaluation(status, policy_version=0, episodes=6, seconds=12.0)
    assert (result.passed, result.completed, result.episodes) == (1, 3, 6)
    assert result.failed_by_class == {"step_limit": 1}
    assert result.mean_reward == pytest.approx(1.5 / 6)
    assert result.pass_rate == pytest.approx(1 / 6)


@pytest.mark.parametrize(
    ("before", "after", "word"), [(1, 3, "rose"), (3, 1, "fell"), (2, 2, "did not change")]
)
def test_the_verdict_says_what_happened(before: int, after: int, word: str) -> None:
    first = evaluation(
        _status("e0", {str(i): (1.0, "pass") for i in range(before)}, {}),
        policy_version=0,
        episodes=6,
        seconds=1,
    )
    last = evaluation(
        _status("e4", {str(i): (1.0, "pass") for i in range(after)}, {}),
        policy_version=4,
        episodes=6,
        seconds=1,
    )
    summary = DemoSummary(first, _training([1, 2, 3, 4]), last)
    assert summary.verdict().startswith(f"held-out pass rate {word}: {before}/6 with v0, {after}/6 with v4")
    assert summary.to_json()["after"]["pass_rate"] == pytest.approx(after / 6)


def test_without_a_new_version_the_verdict_claims_nothing() -> None:
    same = evaluation(_status("e0", {}, {}), policy_version=0, episodes=3, seconds=1)
    assert "nothing can be said" in DemoSummary(same, _training([]), same).verdict()


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["demo", *argv])


def test_defaults_and_bad_options() -> None:
    settings = settings_from_args(_parse("--name", "d1"))
    assert (settings.name, settings.minutes, settings.group_size, settings.eval_per_task) == (
        "d1",
        10.0,
        8,
        3,
    )
    assert settings.toy_variant == "blind"
    assert settings_from_args(_parse("--toy-variant", "shown")).toy_variant == "shown"
    for bad in (["--capacity", "0"], ["--minutes", "0"], ["--lora-rank", "-1"], ["--name", "a b"]):
        with pytest.raises(SystemExit) as exited:
            _parse(*bad)
        assert exited.value.code == 2


def test_the_rollout_reads_weights_from_the_store_the_learner_writes_to(tmp_path: Path) -> None:
    from ops.demo.run import DemoSettings, Stage
    from ops.paths import Paths

    stage = Stage(
        Paths(tmp_path / "home", tmp_path / "cache"), "127.0.0.1:1", tmp_path / "model", DemoSettings("d")
    )
    rollout = stage.rollout_args(versions_run="d-train", pin=None)
    learner = stage.learner_command("d-train")
    objects = str(tmp_path / "home" / "objects")
    assert rollout[rollout.index("--objects") + 1] == objects == learner[learner.index("--objects") + 1]


def test_the_demo_imports_the_toy_variant_it_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import actors.tasks.humaneval
    from ops.demo.run import assemble_tasks

    monkeypatch.setattr(actors.tasks.humaneval, "import_humaneval", lambda out: [])
    for variant, prefix in (("blind", "toy-"), ("shown", "toys-")):
        settings = settings_from_args(_parse("--toy-count", "4", "--toy-variant", variant))
        tasks = assemble_tasks(tmp_path / variant, settings)
        assert [p.name for p in tasks.heldout[:1]] == [f"{prefix}003"]
        assert [p.name for p in tasks.train[:3]] == [f"{prefix}000", f"{prefix}001", f"{prefix}002"]
