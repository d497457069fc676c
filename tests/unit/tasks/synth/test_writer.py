"""The task writer's leak check and solution patch, on folders built here."""

from __future__ import annotations

from pathlib import Path

from actors.tasks.patch import apply_patch, parse_patch
from actors.tasks.synth.writer import find_leaks, solution_patch

ORIGINAL = b"def add(a, b):\n    return a + b\n"
MUTANT = b"def add(a, b):\n    return a - b\n"


def task_with(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for path, data in {"repo/calc.py": MUTANT, **files}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    return tmp_path


def test_a_clean_tree_has_no_leak(tmp_path: Path) -> None:
    assert find_leaks(task_with(tmp_path, {"repo/README": b"calc"}), {"calc.py": ORIGINAL}) == []


def test_every_planted_leak_is_found(tmp_path: Path) -> None:
    planted = {
        "repo/calc.py.orig": ORIGINAL,  # a patch leftover
        "repo/.git/objects/ab/cdef": b"x",  # history
        "repo/__pycache__/calc.cpython-311.pyc": b"\x00",  # bytecode of the original
        "repo/backup/old_calc.txt": ORIGINAL.replace(b"\n", b"\r\n"),  # a copy under any name
    }
    problems = find_leaks(task_with(tmp_path, planted), {"calc.py": ORIGINAL})
    assert any("calc.py.orig" in problem for problem in problems)
    assert any(".git" in problem for problem in problems)
    assert any("__pycache__" in problem for problem in problems)
    assert any("old_calc.txt is a copy of the original calc.py" in problem for problem in problems)


def test_the_solution_patch_turns_the_mutant_back_into_the_original() -> None:
    patch = parse_patch(solution_patch("calc.py", MUTANT, ORIGINAL))
    assert apply_patch(patch, {"calc.py": MUTANT.decode()}.get)["calc.py"] == ORIGINAL.decode()
    no_newline = solution_patch("calc.py", MUTANT.rstrip(b"\n"), ORIGINAL.rstrip(b"\n"))
    restored = apply_patch(parse_patch(no_newline), {"calc.py": MUTANT.rstrip(b"\n").decode()}.get)
    assert restored["calc.py"] == ORIGINAL.rstrip(b"\n").decode()
