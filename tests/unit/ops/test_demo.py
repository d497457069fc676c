from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from actors.scheduler.status import RunStatus
from ops.cli.demo import register, settings_from_args
from ops.demo.summary import DemoSummary, Evaluation, Training, evaluation, paired


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


def _eval(version: int, passes: list[bool]) -> Evaluation:
    """An evaluation of len(passes) samples (task t<i % 4>, seed i), the i-th passed or not."""
    status = RunStatus(f"e{version}")
    for i, passed in enumerate(passes):
        status.drawn[f"ep{version}-{i}"] = (f"t{i % 4}", i)
        status.completed[f"ep{version}-{i}"] = (1.0, "pass") if passed else (-0.2, "fail")
    return evaluation(status, policy_version=version, episodes=len(passes), seconds=1)


@pytest.mark.parametrize(
    ("before", "after", "word"), [(1, 3, "rose"), (3, 1, "fell"), (2, 2, "did not change")]
)
def test_the_verdict_says_what_happened(before: int, after: int, word: str) -> None:
    first = _eval(0, [i < before for i in range(6)])
    last = _eval(4, [i < after for i in range(6)])
    summary = DemoSummary(first, _training([1, 2, 3, 4]), last)
    assert summary.verdict().startswith(f"held-out pass rate {word}: {before}/6 (")
    assert f"{after}/6 ({after / 6:.0%}) with v4" in summary.verdict()
    assert summary.to_json()["after"]["pass_rate"] == pytest.approx(after / 6)
    assert "not unlikely to be chance" in summary.verdict()  # six samples prove nothing either way


def test_the_verdict_pairs_the_samples_and_tests_the_split() -> None:
    before = [i % 16 == 0 for i in range(64)]  # 4 of 64
    after = [i % 16 != 5 for i in range(64)]  # 60 of 64; sample 5, 21, 37, 53 fail after
    middle = _eval(3, [i % 2 == 0 for i in range(64)])
    summary = DemoSummary(_eval(0, before), _training([3, 6]), _eval(6, after), between=(middle,))
    pairs = paired(summary.before, summary.after)
    assert (pairs.gained, pairs.lost) == (56, 0)
    assert pairs.p_value == pytest.approx(2 / 2**56)
    assert "56 gained, 0 lost" in summary.verdict() and "unlikely to be chance" in summary.verdict()
    data = summary.to_json()
    assert data["paired"] == {"gained": 56, "lost": 0, "p_value": pairs.p_value}
    assert [(p["policy_version"], p["passed"]) for p in data["curve"]] == [(0, 4), (3, 32), (6, 60)]
    assert "samples" not in data["before"] and "samples" not in data["between"][0]


def test_pairs_are_matched_by_task_and_seed_not_by_episode_order() -> None:
    first, last = RunStatus("a"), RunStatus("b")
    for status, order in ((first, [("t0", 1), ("t1", 2)]), (last, [("t1", 2), ("t0", 1)])):
        for n, sample in enumerate(order):
            status.drawn[f"{status.run_id}{n}"] = sample
    first.completed["a0"] = (1.0, "pass")  # t0 seed 1 passed before ...
    last.completed["b1"] = (1.0, "pass")  # ... and after, drawn second this time
    last.failed["b0"] = "step_limit"  # t1 seed 2: a failed episode is a miss
    before = evaluation(first, policy_version=0, episodes=2, seconds=1)
    after = evaluation(last, policy_version=1, episodes=2, seconds=1)
    assert after.samples == (("t0", 1, True), ("t1", 2, False))
    assert (paired(before, after).gained, paired(before, after).lost) == (0, 0)
    lonely = _eval(2, [True])  # (t0, 0): a sample the other did not draw counts as a miss there
    assert (paired(before, lonely).gained, paired(before, lonely).lost) == (1, 1)


def test_without_a_new_version_the_verdict_claims_nothing() -> None:
    same = evaluation(_status("e0", {}, {}), policy_version=0, episodes=3, seconds=1)
    assert "nothing can be said" in DemoSummary(same, _training([]), same).verdict()


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["demo", *argv])


def test_defaults_and_bad_options() -> None:
    settings = settings_from_args(_parse("--name", "d1"))
    assert (settings.name, settings.group_size, settings.eval_per_task, settings.max_steps) == (
        "d1",
        8,
        16,
        1,
    )
    assert settings.eval_versions == 3
    assert settings.toy_variant == "blind"
    assert settings_from_args(_parse("--toy-variant", "shown")).toy_variant == "shown"
    for bad in (
        ["--capacity", "0"],
        ["--minutes", "0"],
        ["--eval-versions", "0"],
        ["--lora-rank", "-1"],
        ["--name", "a b"],
    ):
        with pytest.raises(SystemExit) as exited:
            _parse(*bad)
        assert exited.value.code == 2


def test_the_rollout_reads_weights_from_the_store_the_learner_writes_to(tmp_path: Path) -> None:
    from ops.demo.run import DemoSettings, Stage
    from ops.paths import Paths

    stage = Stage(
        Paths(tmp_path / "home", tmp_path / "cache"), "127.0.0.1:1", tmp_path / "model", DemoSettings("d")
    )
    rollout = stage.rollout_args(versions_run="d-train", pin=None, batch=8)
    learner = stage.learner_command("d-train")
    objects = str(tmp_path / "home" / "objects")
    assert rollout[rollout.index("--objects") + 1] == objects == learner[learner.index("--objects") + 1]


def test_the_demo_imports_the_toy_variant_it_is_asked_for(tmp_path: Path) -> None:
    from ops.demo.run import assemble_tasks

    for variant, prefix in (("blind", "toy-"), ("shown", "toys-")):
        settings = settings_from_args(_parse("--toy-count", "4", "--toy-variant", variant))
        tasks = assemble_tasks(tmp_path / variant, settings)
        assert [p.name for p in tasks.heldout[:1]] == [f"{prefix}003"]
        assert [p.name for p in tasks.train[:3]] == [f"{prefix}000", f"{prefix}001", f"{prefix}002"]
        assert len(tasks.heldout) == 1 and len(tasks.train) == 3


def test_the_curve_evaluates_evenly_spaced_versions_between_the_first_and_the_last() -> None:
    from ops.demo.run import versions_to_evaluate

    assert versions_to_evaluate(list(range(1, 13)), 3) == [7]
    assert versions_to_evaluate(list(range(1, 13)), 5) == [4, 7, 9]
    assert versions_to_evaluate([1, 2], 5) == [1]  # never the last twice, never more than was published
    assert versions_to_evaluate([1], 4) == []
    assert versions_to_evaluate([], 3) == [] == versions_to_evaluate([1, 2, 3], 2)


def test_the_training_summary_says_where_the_minutes_went(tmp_path: Path) -> None:
    import json
    from dataclasses import asdict, replace

    from learner.trainer import TrainStats
    from ops.demo.run import learner_step_seconds
    from ops.demo.summary import Training

    def line(version: int, last_s: float) -> str:
        # as the learner writes it: the last pass under "train", every pass under "passes"
        first = TrainStats(0.1, 1.0, 0.0, 0.5, samples=8, tokens=200, seconds=4.0)
        last = replace(first, seconds=last_s)
        passes = [asdict(first), asdict(last)]
        return json.dumps({"version": version, "trajectories": 8, "train": asdict(last), "passes": passes})

    stats = tmp_path / "stats.jsonl"
    stats.write_text("\n".join(line(v, s) for v, s in ((1, 5.5), (2, 3.25), (3, 4.0))) + "\n")
    steps = learner_step_seconds(stats)
    assert steps == [9.5, 7.25, 8.0]
    assert learner_step_seconds(tmp_path / "absent.jsonl") == []
    training = Training(
        "r", 100.0, 10, 10, 5, {}, [1, 2, 3], 24, sampled_tokens=2500, learner_step_s=steps,
        profile={"lines": ["rollout  0.81 cores"]},
    )  # fmt: skip
    lines = training.lines()
    assert lines[0].startswith("generation: 2500 response tokens in 100 s (25.0 per s")
    assert lines[1] == "learner steps: 3, median 8.0 s"
    assert lines[2] == "rollout  0.81 cores"


def test_more_rollout_workers_join_the_same_consumer_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ops.demo.run as run_module
    from ops.demo.run import DemoSettings, Stage
    from ops.paths import Paths

    started: dict[str, list[str]] = {}

    class Recorder:
        def __init__(self, logs: Path) -> None:
            self.logs = logs

        def start(self, commands: dict[str, list[str]]) -> None:
            started.update(commands)

    monkeypatch.setattr(run_module, "Workers", Recorder)
    settings = settings_from_args(_parse("--rollouts", "2"))
    stage = Stage(Paths(tmp_path / "home", tmp_path / "cache"), "127.0.0.1:1", tmp_path / "model", settings)
    stage.workers("d-train", [], stage.rollout_args(versions_run="d-train", pin=None, batch=8))
    assert started["rollout-2"] == started["rollout"]
    assert started["rollout"][started["rollout"].index("--group") + 1] == "d-train.trialog-rollout"
    assert DemoSettings("d").rollouts == 1


def test_the_rollout_options_follow_the_demo_settings(tmp_path: Path) -> None:
    from ops.demo.run import DemoSettings, Stage
    from ops.paths import Paths

    paths = Paths(tmp_path / "home", tmp_path / "cache")
    plain = Stage(paths, "127.0.0.1:1", tmp_path / "model", settings_from_args(_parse("--name", "d")))
    args = plain.rollout_args(versions_run="d-train", pin=None, batch=8)
    assert "--batch-linger-ms" not in args and args[args.index("--backend") + 1] == "torch"
    chosen = settings_from_args(
        _parse("--backend", "vllm", "--batch-linger-ms", "500", "--rollout-batch", "4")
    )
    assert (chosen.backend, chosen.batch_linger_ms, chosen.rollout_batch) == ("vllm", 500, 4)
    stage = Stage(
        paths, "127.0.0.1:1", tmp_path / "model", DemoSettings("d", batch_linger_ms=500, backend="vllm")
    )
    args = stage.rollout_args(versions_run="d-train", pin=None, batch=4)
    assert args[args.index("--batch-linger-ms") + 1] == "500" and args[args.index("--backend") + 1] == "vllm"
    with pytest.raises(SystemExit):
        _parse("--backend", "tpu")
