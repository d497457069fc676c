"""Writing one kept mutant as a task folder, and checking the folder gives nothing of the fix away.

repo/ is the project with the mutant in place; tests/ the project's test files cut down to the
fail-to-pass tests and a sample of pass-to-pass ones (hidden); solution.patch turns the mutant back into
the original; task.toml has the instruction (from the failing tests only) and `[meta.synthesis]`.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from actors.tasks.spec import (
    PATCH_FILE,
    REPO_DIR,
    TASK_FILE,
    TESTS_DIR,
    SynthesisMeta,
    TaskMeta,
    TaskSpec,
    load_task,
    spec_to_toml,
)
from actors.tasks.synth.hidden import cut_tests
from actors.tasks.synth.project import SKIPPED_DIRS, SKIPPED_SUFFIXES, Project

VCS_DIRS = frozenset({".git", ".hg", ".svn", ".bzr", "_darcs", "CVS"})


@dataclass(frozen=True)
class Kept:
    """A mutant that became a task: what the writer needs of it."""

    key: str
    operator: str
    path: str  # the mutated module
    mutant: bytes  # its mutated source
    mutation: str  # describe() of the mutation: for reviewers, never for the agent
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    errors: tuple[tuple[str, str], ...]  # (fail-to-pass id, error excerpt)
    instruction: str
    timeout_s: float


def task_id(project: Project, key: str) -> str:
    return f"{task_id_prefix(project)}{hashlib.sha256(f'{project.source}:{key}'.encode()).hexdigest()[:12]}"


def task_id_prefix(project: Project) -> str:
    """What every task id of `project` starts with (its name, made safe for a folder name, and a dash)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", project.name).strip("-.") or "project"
    return f"{name[:80]}-"


def write_task(project: Project, kept: Kept, out: Path, *, image: str | None = None) -> Path:
    """Write the task under `out` (replacing a folder of the same id) and check it loads and leaks nothing."""
    folder = out / task_id(project, kept.key)
    staging = out / f".{folder.name}.partial"
    spec = TaskSpec(
        id=folder.name,
        instruction=kept.instruction,
        timeout_s=kept.timeout_s,
        image=image,
        meta=TaskMeta(
            tags=("synthesized", project.name, kept.operator),
            source=f"synthesized:{project.source}",
            synthesis=SynthesisMeta(
                project=project.name,
                version=project.version,
                operator=kept.operator,
                file=kept.path,
                mutation=kept.mutation,
                fail_to_pass=kept.fail_to_pass,
                pass_to_pass=kept.pass_to_pass,
                errors=kept.errors,
            ),
        ),
    )
    patch = solution_patch(kept.path, kept.mutant, project.files[kept.path])
    build_folder(
        staging, project, kept.path, kept.mutant, [*kept.fail_to_pass, *kept.pass_to_pass], patch,
        spec_to_toml(spec),
    )  # fmt: skip
    problems = find_leaks(staging, {kept.path: project.files[kept.path]})
    shadowing = sorted(
        flat for flat in hidden_tests(project, []) if PurePosixPath(flat).stem in project.top_level
    )
    if shadowing:  # the grader would import these, not the agent's package
        problems.append(f"hidden tests would shadow the project's own modules: {shadowing}")
    task = load_task(staging)  # every static check of the format: the patch applies, the tests parse
    missing = {test.partition("[")[0] for test in [*kept.fail_to_pass, *kept.pass_to_pass]} - set(
        task.test_ids
    )
    if missing:
        problems.append(f"hidden tests lack {sorted(missing)[:3]} once cut")
    if problems:
        shutil.rmtree(staging)
        raise LeakError(folder.name, problems)
    if folder.exists():
        shutil.rmtree(folder)
    staging.rename(folder)
    return folder


def build_folder(
    staging: Path,
    project: Project,
    path: str,
    mutant: bytes,
    test_ids: Sequence[str],
    patch: str,
    task_toml: str,
) -> None:
    """Write a task folder at `staging` (replacing one there): repo/ the project with `mutant` at `path`,
    tests/ its test files cut to `test_ids`, the solution patch and task.toml as given."""
    if staging.exists():
        shutil.rmtree(staging)
    repo = staging / REPO_DIR
    for name, data in project.files.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(mutant if name == path else data)
    for flat, source in hidden_tests(project, test_ids).items():
        target = staging / TESTS_DIR / flat
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source)
    (staging / PATCH_FILE).write_text(patch)
    (staging / TASK_FILE).write_text(task_toml)


class LeakError(ValueError):
    def __init__(self, task: str, problems: Sequence[str]) -> None:
        super().__init__(f"{task}: " + "; ".join(problems))
        self.problems = tuple(problems)


def hidden_tests(project: Project, test_ids: Sequence[str]) -> dict[str, str]:
    """The hidden test files for `test_ids` (`tests/<flat>::<name>[params]`), each cut to its tests."""
    keep: dict[str, set[str]] = {}
    for test_id in test_ids:
        file_part, _, name = test_id.partition("::")
        flat = PurePosixPath(file_part).name
        keep.setdefault(flat, set()).add(name.partition("[")[0])
    hidden = {
        flat: cut_tests(project.files[project.test_path(flat)].decode(), names)
        for flat, names in sorted(keep.items())
    }
    # The helpers the tests import as siblings; they hold no tests, so they change nothing graded.
    hidden.update({flat: project.files[path].decode() for path, flat in project.support.items()})
    return hidden


def solution_patch(path: str, mutant: bytes, original: bytes) -> str:
    diff = difflib.unified_diff(
        mutant.decode().splitlines(keepends=True),
        original.decode().splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff
    )
    return text


def find_leaks(task_dir: Path, originals: Mapping[str, bytes]) -> list[str]:
    """What in the task folder's repo/ would give the fix away: VCS history, backup or patch leftovers,
    bytecode (of the original), or a copy of an original module anywhere in the tree (any name)."""
    problems: list[str] = []
    repo = task_dir / REPO_DIR
    copies = {_normalized(data): path for path, data in originals.items()}
    for path in sorted(repo.rglob("*")):
        relative = path.relative_to(repo).as_posix()
        parts = PurePosixPath(relative).parts
        if any(part in VCS_DIRS for part in parts):
            problems.append(f"version control data in repo/: {relative}")
        elif any(part in SKIPPED_DIRS for part in parts) or path.name.endswith(SKIPPED_SUFFIXES):
            problems.append(f"a backup, patch leftover or bytecode file in repo/: {relative}")
        elif path.is_file() and not path.is_symlink():
            original = copies.get(_normalized(path.read_bytes()))
            if original is not None:
                problems.append(f"repo/{relative} is a copy of the original {original}")
    return problems


def _normalized(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").strip()
