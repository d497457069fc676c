"""`trialog bench compare`'s crash and churn parts: the crash plan, the arithmetic of redone work, the
churn figures and the sections they render (no Docker)."""

from __future__ import annotations

import argparse
import threading
import time

import pytest

from ops.bench import compare
from ops.bench.compare import churn, crash


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_parts_default_to_all_and_refuse_unknown_names() -> None:
    assert _args().parts == ["tail", "crash", "churn"]
    assert _args("--parts", "churn,churn").parts == ["churn"]
    with pytest.raises(SystemExit):
        _args("--parts", "crash,warp")
    with pytest.raises(SystemExit):
        _args("--crash-steps", "0")


def test_crash_plan_is_seeded_and_covers_the_steps() -> None:
    plan = crash.plan_crashes(400, 30, seed=19)
    assert plan == crash.plan_crashes(400, 30, seed=19)
    assert plan != crash.plan_crashes(400, 30, seed=20)
    assert {c.step for c in plan} == set(range(30))  # first and last steps included
    assert all(0.2 <= c.fraction <= 0.8 for c in plan)


def _cost(step: int, lost: float, recovery: float, snapshots: float = 0.0) -> crash.EpisodeCost:
    return crash.EpisodeCost(step, lost, recovery, total_s=10.0, snapshot_s=snapshots, final_snapshot="s")


def test_redone_work_is_the_lost_step_plus_the_recovery_and_the_ratio_compares_means() -> None:
    comparison = crash.Comparison(
        restart=[_cost(10, 0.2, 4.0), _cost(20, 0.2, 8.0)],
        resume=[_cost(10, 0.2, 0.1, 0.3), _cost(20, 0.2, 0.1, 0.3)],
        step_s=[0.4, 0.4],
    )
    assert comparison.restart[0].redone_s == pytest.approx(4.2)
    assert comparison.ratio == pytest.approx(6.2 / 0.3)


def test_a_restart_redoes_half_the_episode_on_average() -> None:
    assert crash.expected_restart_redone(30, 0.5) == pytest.approx(15 * 0.5)
    assert crash.expected_restart_redone(1, 2.0) == pytest.approx(1.0)  # only the step in flight


def test_break_even_says_how_often_crashes_must_come() -> None:
    assert crash.break_even(6.0, 0.3) == "they pay back once more than one episode in 20 crashes"
    assert crash.break_even(0.1, 0.4) == "they pay back only above 4.0 crashes per episode"
    assert crash.break_even(1.0, 0.0) == "they cost nothing measurable"


def test_crash_section_reports_both_sides_and_the_target() -> None:
    args = _args("--crash-episodes", "2", "--crash-steps", "30")
    comparison = crash.Comparison(
        restart=[_cost(10, 0.2, 4.0), _cost(20, 0.2, 8.0)],
        resume=[_cost(10, 0.2, 0.1, 0.3), _cost(20, 0.2, 0.1, 0.3)],
        step_s=[0.4] * 28,
    )
    section = crash.render(args, "a machine", comparison)
    lines = section.splitlines()
    assert lines[0] == "## compare: crash cost"
    assert "20.7x less (target >= 10x: met)" in section
    assert "steps 10, 20" in section
    slow = crash.Comparison(restart=[_cost(1, 0.2, 0.4)], resume=[_cost(1, 0.2, 0.1)], step_s=[0.4])
    assert "(target >= 10x: NOT met)" in crash.render(args, "a machine", slow)


def test_sustained_churn_counts_completed_cycles_across_threads() -> None:
    done: list[int] = []
    lock = threading.Lock()

    def cycle() -> None:
        time.sleep(0.05)
        with lock:
            done.append(1)

    one, took = churn.sustained(cycle, 1, 0.5)
    four, took_four = churn.sustained(cycle, 4, 0.5)
    assert 0.5 <= took < 0.7 and 0.5 <= took_four < 0.7  # the last cycles end past the time given
    assert 7 <= one <= 11  # about 20 per second for half a second
    assert four > 2.5 * one
    assert len(done) == one + four


def _result(name: str, runtime: str, ms: float, rate: float | None) -> churn.Result:
    result = churn.Result(name, runtime, latencies=[ms / 1000] * 5)
    if rate is not None:
        result.rates = {1: rate / 2, 4: rate}
    return result


def test_targets_are_judged_on_p50_and_the_best_rate() -> None:
    assert churn.meets(_result("x", "runc", 90, 10.0)) == (True, True)
    assert churn.meets(_result("x", "runc", 91, 9.9)) == (False, False)
    result = churn.Result("x", "runc", latencies=[0.01, 0.02, 0.2, 0.3, 0.4])
    assert result.p50 == pytest.approx(0.2) and result.p90 == pytest.approx(0.4)


def test_churn_section_has_a_row_per_variant_and_compares_crun_with_runc() -> None:
    args = _args("--churn-threads", "4")
    results = [
        _result(churn.CLI, "default", 180, 8.0),
        _result("bare", "runc", 150, 8.2),
        _result("bare", "crun", 120, 8.6),
        _result("pool acquire", "default", 0.02, None),
    ]
    section = churn.render(args, "a machine", results, ["runc", "crun"])
    lines = section.splitlines()
    assert lines[0] == "## compare: sandbox churn"
    rows = [line for line in lines if line.startswith("| ") and not line.startswith(("| variant", "| ---"))]
    assert len(rows) == len(results)
    assert "| bare | crun | 120 ms | 120 ms | 4.3 | 8.6 | NOT met | NOT met |" in rows
    assert "- crun against runc, bare: p50 150 -> 120 ms, 8.2 -> 8.6 per second" in lines
    assert "- fastest create+start: bare (crun), 120 ms (target NOT met)" in lines  # the pool makes nothing
    assert "| pool acquire | default | 0 ms | 0 ms | - | - | met | - (see note) |" in rows


def test_trialogs_create_start_is_taken_apart_and_the_engines_floor_judged() -> None:
    results = [
        _result(churn.CLI, "default", 180, 8.0),
        _result(churn.BARE, "runc", 150, 8.0),
        _result(churn.BARE, "crun", 120, 8.0),
        _result(churn.NO_SERVER, "runc", 170, 6.0),
        _result(churn.TRIALOG, "runc", 230, 5.0),
        _result(churn.AHEAD, "runc", 200, 5.0),
        _result(churn.POOL, "default", 0.02, None),
    ]
    lines = churn.where_time_goes(results, "runc")
    assert "bare create+start 150 ms" in lines[0]
    assert "container config (read-only root, tmpfs mounts, seccomp, quotas) +20 ms" in lines[0]
    assert "exec server's start and hello +60 ms" in lines[0]
    assert "creating ahead takes 30 ms (the create)" in lines[0]
    assert "takes 120 ms at best here, above the 90 ms target by itself" in lines[1]
    fast = [*results[:2], _result(churn.BARE, "crun", 80, 8.0), *results[3:]]
    assert len(churn.where_time_goes(fast, "runc")) == 1  # the engine's path could meet it: no such claim
    assert churn.where_time_goes(results[:3], "runc") == []  # a variant missing: nothing to take apart
