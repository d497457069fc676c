"""`trialog bench process-rewards`: its scripted turns and its table (the runs need the stack)."""

from __future__ import annotations

import argparse

from ops.bench.process_rewards import Measured, render, scripts
from ops.paths import REPO_ROOT

TASKS = [
    REPO_ROOT / "examples" / "tasks" / "easy-fix-add",
    REPO_ROOT / "examples" / "tasks" / "easy-fix-range",
]


def test_each_task_gets_five_turns_with_its_solution_among_them() -> None:
    plays = scripts(TASKS)
    assert set(plays) == {"easy-fix-add", "easy-fix-range"}
    for task, turns in plays.items():
        assert [turn["tool"] for turn in turns] == ["run", "apply_patch", "run", "run", "submit"]
        assert turns[1]["diff"] == (REPO_ROOT / "examples" / "tasks" / task / "solution.patch").read_text()


def test_the_table_sets_the_runs_side_by_side_with_the_ratios() -> None:
    args = argparse.Namespace(episodes=4, capacity=2, tasks=TASKS)
    off = Measured("off", 60.0, [10.0, 12.0, 11.0, 13.0], 4, 8.0, 0, 0.0, 0)
    on = Measured("every", 62.0, [10.5, 12.5, 11.5, 13.5], 4, 8.0, 20, 12.0, 12)
    section = render(args, [off, on], 130.0)
    assert section.startswith("## process rewards")
    assert "| `off` | 4 | 11.50 |" in section and "| `every` | 4 | 12.00 |" in section
    assert "20 (12 from cache)" in section
    assert "grading time with process grades against without: 2.50x" in section
    assert "median episode latency: 1.04x" in section
