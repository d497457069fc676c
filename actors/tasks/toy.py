"""`trialog tasks import toy`: a family of tiny verifiable tasks for learning checks and the demo.

Task `toy-NNN` asks for one change: make `NAME()` in `NAME.py` return the number N (it returns 0 as
given). It is verifiable by one frozen test, small enough for a 135M-parameter model to solve sometimes
and fail often, which is what a learning signal needs: groups of attempts with different rewards.

Two variants of the same family (`Variant`):
- `blind` (ids `toy-NNN`): the instruction names the function, the file and N only. Measured with SmolLM2
  at temperature 0.7: 2 of 48 replies pass on toy-000..005 (8-12% in `trialog bench learning` runs),
  mostly because the model invents the function's name (`count_31()`) or copies the system prompt's
  example (`add(a, b)`).
- `shown` (ids `toys-NNN`): the instruction also shows the file as given, as an agent would see it after
  reading it. Measured the same way: 22 of 48 (46%) pass, the rest ramble in prose or return something
  else: a pass rate in the middle, where groups of replies differ most.
The frozen test, the repo and the solution are the same in both; only the instruction differs. With the
settings of `trialog bench learning`, SmolLM2 learns both within a dozen GRPO steps (BENCHMARKS.md).

The family is deterministic: task i has the function name NAMES[i % len(NAMES)] and N = 3 + 7 * i, so two
imports with the same arguments write byte-identical folders (same task versions). Every `holdout_every`-th
task goes to `heldout/`, the others to `train/`, so evaluation runs on tasks the learner never trains on.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from actors.tasks.patch import make_patch
from actors.tasks.spec import PATCH_FILE, REPO_DIR, TASK_FILE, TESTS_DIR, TaskMeta, TaskSpec, spec_to_toml

NAMES = ("answer", "value", "number", "result", "count", "total")
TIMEOUT_S = 30.0
TRAIN_DIR = "train"
HELDOUT_DIR = "heldout"


class Variant(StrEnum):
    BLIND = "blind"  # the instruction names the function, the file and N
    SHOWN = "shown"  # ... and shows the file as given


ID_PREFIX = {Variant.BLIND: "toy", Variant.SHOWN: "toys"}


@dataclass(frozen=True)
class ToyTask:
    index: int
    variant: Variant = Variant.BLIND

    @property
    def task_id(self) -> str:
        return f"{ID_PREFIX[self.variant]}-{self.index:03d}"

    @property
    def name(self) -> str:
        return NAMES[self.index % len(NAMES)]

    @property
    def target(self) -> int:
        return 3 + 7 * self.index


def _source(name: str, returned: int) -> str:
    return f'def {name}():\n    """The number this module is asked for."""\n    return {returned}\n'


def task_files(task: ToyTask) -> dict[str, str]:
    """Every file of the task folder (relative path -> text)."""
    module, given, solved = task.name, _source(task.name, 0), _source(task.name, task.target)
    instruction = f"Change `{module}()` in `{module}.py` so that it returns the number {task.target}."
    if task.variant is Variant.SHOWN:
        instruction = f"`{module}.py` is:\n```python\n{given}```\n{instruction}"
    spec = TaskSpec(
        id=task.task_id,
        instruction=instruction,
        timeout_s=TIMEOUT_S,
        meta=TaskMeta(difficulty="easy", tags=("toy", "one-line"), source="trialog-toy"),
    )
    test = (
        f'"""Frozen test of {task.task_id}."""\n\n'
        f"from {module} import {module}\n\n\n"
        f"def test_{module}_returns_{task.target}():\n"
        f"    assert {module}() == {task.target}\n"
    )
    return {
        TASK_FILE: spec_to_toml(spec),
        f"{REPO_DIR}/{module}.py": given,
        f"{TESTS_DIR}/test_{module}.py": test,
        PATCH_FILE: make_patch({f"{module}.py": given}, {f"{module}.py": solved}),
    }


def _write(task: ToyTask, out_dir: Path) -> Path:
    folder = out_dir / task.task_id
    staging = out_dir / f".{task.task_id}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    for relative, text in task_files(task).items():
        path = staging / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    # Staged then swapped in: an interrupted import never leaves half a task.
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return folder


@dataclass(frozen=True)
class ToySplit:
    train: list[Path]
    heldout: list[Path]


def import_toy(
    out_dir: Path, *, count: int, holdout_every: int = 0, variant: Variant = Variant.BLIND
) -> ToySplit:
    """Write `count` toy tasks of `variant` under out_dir/train and out_dir/heldout; `holdout_every` 0 holds
    none out."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    if holdout_every < 0 or holdout_every == 1:
        raise ValueError(f"holdout_every must be 0 (none) or at least 2, not {holdout_every}")
    split = ToySplit([], [])
    for index in range(count):
        held = holdout_every > 0 and index % holdout_every == holdout_every - 1
        side = out_dir / (HELDOUT_DIR if held else TRAIN_DIR)
        side.mkdir(parents=True, exist_ok=True)
        (split.heldout if held else split.train).append(_write(ToyTask(index, variant), side))
    return split
