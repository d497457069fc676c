"""`trialog bench learning --pipeline`: the race's clock, curves and verdict (the sides themselves run
the real pipeline and sandboxes: a benchmark, recorded in BENCHMARKS.md)."""

from __future__ import annotations

import argparse

from ops.bench.learning import add_arguments
from ops.bench.learning_race import Point, curve, grid, minutes_to, newest_at, render
from ops.paired import Outcomes


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_grid_starts_at_zero_and_ends_at_the_budget() -> None:
    assert grid(6.0, 1.5) == [0.0, 1.5, 3.0, 4.5, 6.0]
    assert grid(5.0, 2.0) == [0.0, 2.0, 4.0, 5.0]


def test_each_minute_takes_the_newest_version_ready_by_then() -> None:
    ready = [(0.8, 1), (1.4, 2), (3.1, 3)]
    assert [newest_at(ready, m) for m in (0.0, 1.0, 1.5, 3.0, 3.1, 9.0)] == [0, 1, 2, 2, 3, 3]


def test_a_version_is_scored_once_however_many_minutes_show_it() -> None:
    scored: list[int] = []

    def score(version: int) -> Outcomes:
        scored.append(version)
        return Outcomes((True,) * version + (False,) * (4 - version))

    points = curve([(1.0, 1), (2.5, 3)], [0.0, 1.0, 2.0, 3.0], score)
    assert scored == [0, 1, 3]
    assert [(p.minute, p.version, p.passed, p.episodes) for p in points] == [
        (0.0, 0, 0, 4), (1.0, 1, 1, 4), (2.0, 1, 1, 4), (3.0, 3, 3, 4),
    ]  # fmt: skip


def test_minutes_to_a_threshold_is_the_first_point_reaching_it() -> None:
    points = [Point(0, 0, 5, 64), Point(1.5, 2, 40, 64), Point(3, 4, 60, 64)]
    assert minutes_to(points, 0.5) == 1.5
    assert minutes_to(points, 0.8) == 3
    assert minutes_to(points, 0.99) is None


def test_the_section_says_how_much_sooner_the_pipeline_got_there() -> None:
    args = _args("--pipeline", "--minutes", "3", "--eval-every", "1.5")
    loop = [Point(0, 0, 5, 64), Point(1.5, 2, 20, 64), Point(3, 4, 60, 64)]
    pipeline = [Point(0, 0, 5, 64), Point(1.5, 9, 58, 64), Point(3, 17, 62, 64)]
    text = render(args, loop, pipeline, 400.0, loop_detail="4 steps", pipeline_detail="17 versions")
    assert "minutes to 50% held-out: loop 3, pipeline 1.5; the pipeline 2.00x sooner (meets" in text
    assert "minutes to 80% held-out: loop 3, pipeline 1.5; the pipeline 2.00x sooner" in text
    assert "| 1.5 | v2 | 20/64 (31%) | v9 | 58/64 (91%) |" in text
    slow = [Point(0, 0, 5, 64), Point(1.5, 9, 10, 64), Point(3, 17, 20, 64)]
    text = render(args, loop, slow, 400.0, loop_detail="4 steps", pipeline_detail="17 versions")
    assert "pipeline not reached; the pipeline did not reach it" in text
