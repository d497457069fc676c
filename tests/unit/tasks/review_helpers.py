"""Task sets for review tests: plain tasks and a synthesized one (with a [meta.synthesis] table)."""

from __future__ import annotations

from pathlib import Path

from .helpers import TASK_TOML, make_task

SYNTHESIS = """
[meta.synthesis]
project = "calclib"
version = "1.2.0"
operator = "swap-binary-operator"
file = "calc.py"
mutation = "`+` -> `-` in `add`"
fail_to_pass = ["tests/test_calc.py::test_add"]
pass_to_pass = ["tests/test_calc.py::test_zero"]

[meta.synthesis.errors]
"tests/test_calc.py::test_add" = "assert -1 == 5\\n +  where -1 = add(2, 3)"
"""


def make_synthesized(root: Path, task_id: str = "calc-synth") -> Path:
    return make_task(root, toml=TASK_TOML.format(id=task_id, protected='["tests/**"]') + SYNTHESIS)


def make_set(root: Path, plain: int = 2) -> Path:
    """`plain` plain tasks (calc-0, calc-1, ...) and one synthesized (calc-synth) under `root`."""
    for index in range(plain):
        make_task(root / f"calc-{index}", task_id=f"calc-{index}")
    make_synthesized(root / "calc-synth")
    return root
