"""The task format: one folder per task, loaded and checked before anything runs it.

```
task.toml        id, instruction, timeout_s, build_command (optional), protected (globs relative to repo/),
                 image (optional), [meta] difficulty / tags / source (all optional),
                 [limits] memory / cpus / pids / disk (all optional: the sandbox's quotas for this task)
repo/            the initial tree the agent works in (may hold visible tests)
tests/           hidden, frozen acceptance tests (pytest files), never copied into the agent's sandbox
solution.patch   the reference solution: a unified diff against repo/, applied with -p1
```

`load_task` checks everything that can be checked without running code: every field and its type, unknown
keys (a typo must not silently drop a setting), the globs, that the tests exist and parse, that the
solution applies to repo/ and leaves protected paths alone. Any problem raises `TaskError` naming the file
and the problem. Running the tests (unsolvable, already passing, flaky) is `trialog tasks validate`'s job.

Task folders come from outside (a downloaded task set is as untrusted as a policy), and validation applies
the solution on the host. So links are checked by where they really resolve, chains included: a link in
repo/ must resolve inside repo/, one in tests/ inside tests/, absolute targets are refused, and no patched
path may lie under a link or be one. A link pointing at a patched file stays allowed (the write lands on
the real file, inside repo/). The applier
(`actors.tasks.patch.apply_to_tree`) also writes without following links. Not covered: a task folder
changed by someone else between `load_task` and `copy_repo` (the checks are not repeated on the copy, but
the no-follow writes still keep the patch inside it).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.tasks.globs import GlobSet, glob_problem
from actors.tasks.patch import FilePatch, PatchError, apply_patch, apply_to_tree, parse_patch, read_tree_file
from actors.tasks.testids import TestFileError, discover_test_ids
from sandbox_agent.limits import parse_size

TASK_FILE = "task.toml"
REPO_DIR = "repo"
TESTS_DIR = "tests"
PATCH_FILE = "solution.patch"

DIFFICULTIES = ("easy", "medium", "hard")
MAX_TIMEOUT_S = 24 * 3600
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Written by running Python or pytest in a task folder; never part of what a task *is*.
_IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache"})
_IGNORED_SUFFIXES = (".pyc", ".pyo")


class TaskError(ValueError):
    """A malformed task: `path` is the offending file or folder, `problem` says what is wrong with it."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class SynthesisMeta:
    """How a synthesized task was made (`[meta.synthesis]`): the project, the mutation, and the tests it
    broke. Never shown to the agent (only the instruction is); for reviewers, audits and statistics."""

    project: str
    version: str
    operator: str
    file: str  # the mutated module, relative to repo/
    mutation: str  # what was changed, e.g. "`<` -> `<=` in `take`": it names the fix, so never shown
    fail_to_pass: tuple[str, ...]  # hidden test ids that fail as given and pass with the solution
    pass_to_pass: tuple[str, ...]  # hidden test ids that pass both ways
    errors: tuple[tuple[str, str], ...] = ()  # (fail-to-pass id, an excerpt of its error as given)

    def as_dict(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "version": self.version,
            "operator": self.operator,
            "file": self.file,
            "mutation": self.mutation,
            "fail_to_pass": list(self.fail_to_pass),
            "pass_to_pass": list(self.pass_to_pass),
            "errors": dict(self.errors),
        }


@dataclass(frozen=True)
class TaskMeta:
    difficulty: str | None = None
    tags: tuple[str, ...] = ()
    source: str | None = None
    synthesis: SynthesisMeta | None = None


@dataclass(frozen=True)
class TaskLimits:
    """The sandbox quotas a task asks for (`[limits]`); an unset one keeps the sandbox default."""

    memory: str | None = None  # a size: "512m", "2g"
    cpus: float | None = None
    pids: int | None = None
    disk: str | None = None  # for the workspace and /tmp each

    def as_dict(self) -> dict[str, Any]:
        return {"memory": self.memory, "cpus": self.cpus, "pids": self.pids, "disk": self.disk}


@dataclass(frozen=True)
class TaskSpec:
    """The contents of task.toml."""

    id: str
    instruction: str
    timeout_s: float
    build_command: str | None = None
    protected: tuple[str, ...] = ()
    image: str | None = None
    meta: TaskMeta = field(default_factory=TaskMeta)
    limits: TaskLimits = field(default_factory=TaskLimits)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form (optional fields present, as null when unset)."""
        return {
            "id": self.id,
            "instruction": self.instruction,
            "timeout_s": self.timeout_s,
            "build_command": self.build_command,
            "protected": list(self.protected),
            "image": self.image,
            "meta": {
                "difficulty": self.meta.difficulty,
                "tags": list(self.meta.tags),
                "source": self.meta.source,
                "synthesis": None if self.meta.synthesis is None else self.meta.synthesis.as_dict(),
            },
            "limits": self.limits.as_dict(),
        }


@dataclass(frozen=True)
class Task:
    """A loaded, statically checked task."""

    root: Path
    spec: TaskSpec
    version: str  # content hash of the folder (see task_version)
    test_ids: tuple[str, ...]  # frozen test ids, relative to the task folder (see actors.tasks.testids)
    solution: tuple[FilePatch, ...]

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def repo_dir(self) -> Path:
        return self.root / REPO_DIR

    @property
    def tests_dir(self) -> Path:
        return self.root / TESTS_DIR

    @property
    def patch_path(self) -> Path:
        return self.root / PATCH_FILE

    @property
    def protected(self) -> GlobSet:
        return GlobSet.compile(self.spec.protected)

    def copy_repo(self, dest: Path, *, solved: bool = False) -> Path:
        """Copy repo/ to `dest` (which must not exist), with the reference solution applied if `solved`."""
        shutil.copytree(self.repo_dir, dest, symlinks=True, ignore=shutil.ignore_patterns(*_IGNORED_DIRS))
        if solved:
            apply_to_tree(dest, self.solution)
        return dest


# ---- task.toml ------------------------------------------------------------------------------------------


def parse_spec(data: Mapping[str, Any], path: Path) -> TaskSpec:
    """Check the parsed task.toml `data`; problems are reported against `path`."""
    fields = _Fields(data, path, where="")
    spec = TaskSpec(
        id=fields.string("id", pattern=_ID, hint="letters, digits, '.', '_' or '-', at most 128"),
        instruction=fields.string("instruction"),
        timeout_s=fields.number("timeout_s"),
        build_command=fields.optional_string("build_command"),
        protected=fields.globs("protected"),
        image=fields.optional_string("image"),
        meta=_parse_meta(fields.table("meta"), path),
        limits=_parse_limits(fields.table("limits"), path),
    )
    fields.reject_unknown()
    return spec


def _parse_limits(data: Mapping[str, Any], path: Path) -> TaskLimits:
    fields = _Fields(data, path, where="limits.")
    limits = TaskLimits(
        memory=fields.optional_size("memory"),
        cpus=fields.optional_positive("cpus", float),
        pids=fields.optional_positive("pids", int),
        disk=fields.optional_size("disk"),
    )
    fields.reject_unknown()
    return limits


def _parse_meta(data: Mapping[str, Any], path: Path) -> TaskMeta:
    fields = _Fields(data, path, where="meta.")
    meta = TaskMeta(
        difficulty=fields.optional_string("difficulty", choices=DIFFICULTIES),
        tags=fields.strings("tags"),
        source=fields.optional_string("source"),
        synthesis=_parse_synthesis(fields.table("synthesis"), path),
    )
    fields.reject_unknown()
    return meta


def _parse_synthesis(data: Mapping[str, Any], path: Path) -> SynthesisMeta | None:
    if not data:
        return None
    fields = _Fields(data, path, where="meta.synthesis.")
    synthesis = SynthesisMeta(
        project=fields.string("project"),
        version=fields.string("version"),
        operator=fields.string("operator"),
        file=fields.string("file"),
        mutation=fields.string("mutation"),
        fail_to_pass=fields.strings("fail_to_pass"),
        pass_to_pass=fields.strings("pass_to_pass"),
        errors=tuple(fields.string_table("errors").items()),
    )
    fields.reject_unknown()
    if not synthesis.fail_to_pass:
        raise TaskError(path, "field 'meta.synthesis.fail_to_pass' must name at least one test")
    unknown = sorted(set(dict(synthesis.errors)) - set(synthesis.fail_to_pass))
    if unknown:
        raise TaskError(path, f"field 'meta.synthesis.errors' names tests not in fail_to_pass: {unknown}")
    return synthesis


class _Fields:
    """Typed, named access to one TOML table, remembering which keys were read."""

    def __init__(self, data: Mapping[str, Any], path: Path, where: str) -> None:
        self.data, self.path, self.where = data, path, where
        self.read: set[str] = set()

    def _error(self, key: str, problem: str) -> TaskError:
        return TaskError(self.path, f"field '{self.where}{key}' {problem}")

    def _get(self, key: str) -> Any:
        self.read.add(key)
        return self.data.get(key)

    def string(self, key: str, *, pattern: re.Pattern[str] | None = None, hint: str = "") -> str:
        value = self._get(key)
        if value is None:
            raise self._error(key, "is missing")
        return self._check_string(key, value, pattern, hint)

    def optional_string(self, key: str, *, choices: Sequence[str] = ()) -> str | None:
        value = self._get(key)
        if value is None:
            return None
        text = self._check_string(key, value, None, "")
        if choices and text not in choices:
            raise self._error(key, f"must be one of {', '.join(choices)} (got {text!r})")
        return text

    def _check_string(self, key: str, value: Any, pattern: re.Pattern[str] | None, hint: str) -> str:
        if not isinstance(value, str):
            raise self._error(key, f"must be a string (got {type(value).__name__})")
        if not value.strip():
            raise self._error(key, "must not be empty")
        if pattern is not None and not pattern.fullmatch(value):
            raise self._error(key, f"is not valid: {value!r} ({hint})")
        return value

    def number(self, key: str) -> float:
        value = self._get(key)
        if value is None:
            raise self._error(key, "is missing")
        # bool is an int in Python; `timeout_s = true` is a mistake, not 1 second.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._error(key, f"must be a number of seconds (got {type(value).__name__})")
        if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
            raise self._error(key, f"must be > 0 and <= {MAX_TIMEOUT_S} (got {value})")
        return float(value)

    def optional_size(self, key: str) -> str | None:
        text = self.optional_string(key)
        if text is not None:
            try:
                size = parse_size(text)
            except ValueError as exc:
                raise self._error(key, str(exc)) from None
            if size == 0:
                raise self._error(key, f"must be above 0 (got {text!r})")
        return text

    def optional_positive(self, key: str, kind: type[int] | type[float]) -> Any:
        value = self._get(key)
        if value is None:
            return None
        allowed = (int,) if kind is int else (int, float)
        if isinstance(value, bool) or not isinstance(value, allowed) or not value > 0:
            raise self._error(key, f"must be a positive {kind.__name__} (got {value!r})")
        return kind(value)

    def strings(self, key: str) -> tuple[str, ...]:
        value = self._get(key)
        if value is None:
            return ()
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            raise self._error(key, "must be a list of non-empty strings")
        return tuple(value)

    def globs(self, key: str) -> tuple[str, ...]:
        patterns = self.strings(key)
        for pattern in patterns:
            problem = glob_problem(pattern)
            if problem:
                raise self._error(key, f"has a bad glob {pattern!r}: it {problem}")
        return patterns

    def string_table(self, key: str) -> dict[str, str]:
        table = self.table(key)
        if not all(isinstance(value, str) for value in table.values()):
            raise self._error(key, "must be a table of strings")
        return dict(table)

    def table(self, key: str) -> Mapping[str, Any]:
        value = self._get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._error(key, f"must be a table (got {type(value).__name__})")
        return value

    def reject_unknown(self) -> None:
        unknown = sorted(set(self.data) - self.read)
        if unknown:
            names = ", ".join(f"'{self.where}{key}'" for key in unknown)
            raise TaskError(self.path, f"unknown field(s) {names} (a typo?)")


def spec_to_toml(spec: TaskSpec) -> str:
    """task.toml text that `parse_spec` reads back as `spec`."""
    lines = [f"id = {toml_string(spec.id)}", f"instruction = {toml_string(spec.instruction)}"]
    lines.append(f"timeout_s = {_toml_number(spec.timeout_s)}")
    if spec.build_command is not None:
        lines.append(f"build_command = {toml_string(spec.build_command)}")
    lines.append(f"protected = [{', '.join(toml_string(p) for p in spec.protected)}]")
    if spec.image is not None:
        lines.append(f"image = {toml_string(spec.image)}")
    lines += ["", "[meta]"]
    if spec.meta.difficulty is not None:
        lines.append(f"difficulty = {toml_string(spec.meta.difficulty)}")
    lines.append(f"tags = [{', '.join(toml_string(t) for t in spec.meta.tags)}]")
    if spec.meta.source is not None:
        lines.append(f"source = {toml_string(spec.meta.source)}")
    if spec.meta.synthesis is not None:
        lines += ["", *_synthesis_toml(spec.meta.synthesis)]
    limits = [(k, v) for k, v in spec.limits.as_dict().items() if v is not None]
    if limits:
        lines += ["", "[limits]"]
        lines += [
            f"{k} = {toml_string(v) if isinstance(v, str) else _toml_number(float(v))}" for k, v in limits
        ]
    return "\n".join(lines) + "\n"


def _synthesis_toml(synthesis: SynthesisMeta) -> list[str]:
    def strings(values: Sequence[str]) -> str:
        return "[" + ", ".join(toml_string(value) for value in values) + "]"

    lines = ["[meta.synthesis]"]
    for key in ("project", "version", "operator", "file", "mutation"):
        lines.append(f"{key} = {toml_string(getattr(synthesis, key))}")
    lines.append(f"fail_to_pass = {strings(synthesis.fail_to_pass)}")
    lines.append(f"pass_to_pass = {strings(synthesis.pass_to_pass)}")
    lines += ["", "[meta.synthesis.errors]"]
    lines += [f"{toml_string(test)} = {toml_string(error)}" for test, error in synthesis.errors]
    return lines


_TOML_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def toml_string(text: str) -> str:
    """A TOML basic string (control characters escaped, everything else literal UTF-8)."""
    out = []
    for char in text:
        if char in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


# ---- the folder -----------------------------------------------------------------------------------------


def load_task(root: Path) -> Task:
    """Load and statically check the task folder `root`; raises TaskError naming the file at fault."""
    root = Path(root)
    if not root.is_dir():
        raise TaskError(root, "is not a folder")
    spec = _load_spec(root / TASK_FILE)
    repo_dir, tests_dir = _folder(root, REPO_DIR), _folder(root, TESTS_DIR)
    repo_links = _check_links(repo_dir)
    _check_links(tests_dir)
    if (repo_dir / ".git").exists() or (repo_dir / ".git").is_symlink():
        raise TaskError(
            repo_dir / ".git", "task repos are shipped without git history (it may hold the solution)"
        )
    try:
        test_ids = discover_test_ids(root, tests_dir)
    except TestFileError as exc:
        raise TaskError(exc.path, exc.problem) from None
    if not test_ids:
        raise TaskError(tests_dir, "holds no tests (test_*.py or *_test.py files with test functions)")
    solution = _load_solution(root / PATCH_FILE, repo_dir, GlobSet.compile(spec.protected), repo_links)
    return Task(root=root, spec=spec, version=task_version(root), test_ids=test_ids, solution=solution)


def _load_spec(path: Path) -> TaskSpec:
    if not path.is_file():
        raise TaskError(path, "is missing")
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TaskError(path, f"is not UTF-8 text ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(path, f"is not valid TOML: {exc}") from None
    return parse_spec(data, path)


def _folder(root: Path, name: str) -> Path:
    path = root / name
    if path.is_symlink() or not path.is_dir():
        raise TaskError(path, "is missing (or is not a folder)")
    return path


def _check_links(folder: Path) -> dict[str, str]:
    """A symlink in a task may only point to another place inside the same folder, once fully resolved.

    The check resolves the whole chain as the kernel will (`os.path.realpath`), not the target's text: a
    lexical check passes `p -> q/q/../../../outside` with `q -> .`, which climbs out. Absolute targets are
    refused whatever they name (the same path means something else in the sandbox). Returns each link's
    path relative to `folder` with its resolved target, also relative to `folder`.
    """
    base = os.path.realpath(folder)
    resolved_links: dict[str, str] = {}
    for path in _walk(folder):
        if path.is_symlink():
            target = os.readlink(path)
            resolved = os.path.realpath(path)
            if os.path.isabs(target) or not (resolved == base or resolved.startswith(base + os.sep)):
                raise TaskError(path, f"is a symbolic link that leaves {folder.name}/ ({target})")
            resolved_links[path.relative_to(folder).as_posix()] = os.path.relpath(resolved, base)
    return resolved_links


def _check_patched_paths(path: Path, changes: Iterable[str], links: Mapping[str, str]) -> None:
    """No patched file may be, or lie under, a link of repo/: writing through a link writes wherever it
    points. (The applier refuses this at write time too; here it is refused before anything runs.) A link
    that points *at* a patched file is allowed: the write lands on the real file, inside repo/."""
    for changed in changes:
        parts = changed.split("/")
        for prefix in ("/".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if prefix in links:
                raise TaskError(path, f"patches {changed}, which lies under the symbolic link {prefix}")


def _load_solution(
    path: Path, repo_dir: Path, protected: GlobSet, links: Mapping[str, str]
) -> tuple[FilePatch, ...]:
    if not path.is_file():
        raise TaskError(path, "is missing")
    try:
        patch = parse_patch(path.read_bytes().decode("utf-8"))
        changes = apply_patch(patch, read_tree_file(repo_dir))
    except UnicodeDecodeError as exc:
        raise TaskError(path, f"is not UTF-8 text ({exc.reason})") from None
    except PatchError as exc:
        raise TaskError(path, f"does not apply to {REPO_DIR}/: {exc}") from None
    except UnicodeError as exc:
        raise TaskError(path, f"patches a file of {REPO_DIR}/ that is not UTF-8 text: {exc}") from None
    _check_patched_paths(path, changes, links)
    touched = protected.select(changes)
    if touched:
        raise TaskError(path, f"changes protected paths: {', '.join(touched)}")
    return patch


def _walk(folder: Path) -> Iterator[Path]:
    """Every entry under `folder` except ignored caches, never descending through symlinks."""
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS)
        here = Path(dirpath)
        for name in sorted(dirnames + filenames):
            if not name.endswith(_IGNORED_SUFFIXES):
                yield here / name


def task_version(root: Path) -> str:
    """The content hash of a task folder: sha256 over sorted relative paths, kinds and bytes (hex).

    Caches Python and pytest leave behind are ignored, so running a task's tests does not change it;
    file modes and timestamps are not part of a task. A symlink counts by its target, not what it points to.
    """
    digest = hashlib.sha256(b"trialog-task-v1\0")
    for relative, kind, data in sorted(_entries(root)):
        digest.update(kind + b"\0" + relative.encode("utf-8", "surrogateescape") + b"\0")
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _entries(root: Path) -> Iterator[tuple[str, bytes, bytes]]:
    for path in _walk(root):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            yield relative, b"l", os.readlink(path).encode("utf-8", "surrogateescape")
        elif path.is_file():
            yield relative, b"f", path.read_bytes()
        elif not path.is_dir():
            raise TaskError(path, "is neither a file, a folder nor a symbolic link")


# ---- task sets ------------------------------------------------------------------------------------------


def find_tasks(root: Path) -> list[Path]:
    """Task folders at or under `root`: a folder with task.toml is a task and is not searched further."""
    root = Path(root)
    if not root.is_dir():
        raise TaskError(root, "is not a folder")
    if (root / TASK_FILE).is_file():
        return [root]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if TASK_FILE in filenames and Path(dirpath) != root:
            found.append(Path(dirpath))
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS and not d.startswith("."))
    return sorted(found)


def find_task_folders(root: Path) -> tuple[list[Path], list[TaskError]]:
    """Like `find_tasks`, but also every folder that is not a task and holds none, as a problem (a folder
    whose task.toml is missing or misnamed must not be skipped in silence): `root` itself when nothing under
    it is a task, else each subfolder of a folder of tasks that holds no task.toml at any depth."""
    root = Path(root)
    if not root.is_dir():
        return [], [TaskError(root, "is not a folder")]
    found, problems = _task_folders(root)
    if not found and not problems:
        problems = [
            TaskError(root, f"holds no task ({TASK_FILE} is missing, here and in every folder below)")
        ]
    return found, problems


def _task_folders(folder: Path) -> tuple[list[Path], list[TaskError]]:
    if (folder / TASK_FILE).is_file():
        return [folder], []
    found: list[Path] = []
    problems: list[TaskError] = []
    for child in sorted(folder.iterdir()):
        if (
            child.is_symlink()
            or not child.is_dir()
            or child.name in _IGNORED_DIRS
            or child.name.startswith(".")
        ):
            continue
        below, wrong = _task_folders(child)
        if not below:  # the folder at fault is the highest one without a task, not each folder inside it
            wrong = [TaskError(child, f"is not a task: {TASK_FILE} is missing (and no folder below has one)")]
        found += below
        problems += wrong
    return found, problems


@dataclass(frozen=True)
class TaskSurvey:
    """Every task under some folders, loaded and statically checked, and every problem found: one pass
    reports all of them, so that a task set is fixed in one round and not one error at a time."""

    tasks: tuple[Task, ...]
    problems: tuple[TaskError, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def survey_tasks(roots: Iterable[Path]) -> TaskSurvey:
    """Load every task folder under `roots` (`find_task_folders`), collecting each problem instead of
    stopping at the first: malformed tasks, folders that are not tasks, and ids used twice."""
    tasks: list[Task] = []
    problems: list[TaskError] = []
    seen: dict[str, Path] = {}
    for root in roots:
        folders, wrong = find_task_folders(root)
        problems += wrong
        for folder in folders:
            try:
                task = load_task(folder)
            except TaskError as exc:
                problems.append(exc)
                continue
            if task.id in seen:
                problems.append(
                    TaskError(folder / TASK_FILE, f"id {task.id!r} is also used by {seen[task.id]}")
                )
                continue
            seen[task.id] = folder
            tasks.append(task)
    return TaskSurvey(tuple(tasks), tuple(sorted(problems, key=lambda problem: str(problem.path))))


def load_tasks(roots: Iterable[Path]) -> list[Task]:
    """Every task under `roots`, in path order; duplicate ids are an error (ids key the `tasks` topic)."""
    tasks: list[Task] = []
    seen: dict[str, Path] = {}
    for root in roots:
        for folder in find_tasks(root):
            task = load_task(folder)
            if task.id in seen:
                raise TaskError(folder / TASK_FILE, f"id {task.id!r} is also used by {seen[task.id]}")
            seen[task.id] = folder
            tasks.append(task)
    return tasks
