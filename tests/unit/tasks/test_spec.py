from __future__ import annotations

import dataclasses
import os
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.tasks.spec import (
    SynthesisMeta,
    TaskError,
    TaskMeta,
    TaskSpec,
    find_tasks,
    load_task,
    load_tasks,
    parse_spec,
    spec_to_toml,
    task_version,
)

from .helpers import REPO, SOLVED, TASK_TOML, make_task


def test_valid_task_loads(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "t"))
    assert task.id == "calc-add"
    assert task.spec == TaskSpec(
        id="calc-add",
        instruction="Make add() add.",
        timeout_s=20.0,
        protected=("tests/**",),
        meta=TaskMeta(difficulty="easy", tags=("test",)),
    )
    assert task.test_ids == ("tests/test_calc.py::test_add", "tests/test_calc.py::test_zero")
    assert [f.path for f in task.solution] == ["calc.py"]
    assert len(task.version) == 64
    solved = task.copy_repo(tmp_path / "solved", solved=True)
    assert (solved / "calc.py").read_text() == SOLVED["calc.py"]
    assert (task.copy_repo(tmp_path / "plain") / "calc.py").read_text() == REPO["calc.py"]
    assert task.spec.as_dict()["meta"] == {
        "difficulty": "easy",
        "tags": ["test"],
        "source": None,
        "synthesis": None,
    }


def _toml(**replace: str) -> str:
    text = TASK_TOML.format(id="calc-add", protected='["tests/**"]')
    for old, new in replace.items():
        text = text.replace(old.replace("_EQ_", " = "), new)
    return text


def _set_toml(text: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        (root / "task.toml").write_text(text)

    return mutate


def _remove(relative: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        target = root / relative
        shutil.rmtree(target) if target.is_dir() else target.unlink()

    return mutate


def _write(relative: str, text: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)

    return mutate


def _link(relative: str, target: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        os.symlink(target, root / relative)

    return mutate


BAD_PATCH = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a * b\n+    return a + b\n"
)
PROTECTED_PATCH = (
    "--- a/tests/test_visible.py\n+++ b/tests/test_visible.py\n@@ -1,2 +1,2 @@\n"
    " def test_nothing():\n-    pass\n+    assert True\n"
)

MALFORMED = {
    "missing task.toml": (_remove("task.toml"), "task.toml", "is missing"),
    "bad toml": (_set_toml("id = \n"), "task.toml", "not valid TOML"),
    "missing id": (_set_toml(_toml(**{'id = "calc-add"': ""})), "task.toml", "'id' is missing"),
    "bad id": (_set_toml(_toml(**{'"calc-add"': '"calc add/1"'})), "task.toml", "'id' is not valid"),
    "id not a string": (_set_toml(_toml(**{'"calc-add"': "7"})), "task.toml", "'id' must be a string"),
    "empty instruction": (
        _set_toml(_toml(**{'"Make add() add."': '"  "'})),
        "task.toml",
        "'instruction' must not be empty",
    ),
    "timeout as string": (
        _set_toml(_toml(**{"timeout_s = 20": 'timeout_s = "20"'})),
        "task.toml",
        "'timeout_s'",
    ),
    "timeout as bool": (_set_toml(_toml(**{"timeout_s = 20": "timeout_s = true"})), "task.toml", "got bool"),
    "negative timeout": (
        _set_toml(_toml(**{"timeout_s = 20": "timeout_s = -1"})),
        "task.toml",
        "must be > 0",
    ),
    "infinite timeout": (
        _set_toml(_toml(**{"timeout_s = 20": "timeout_s = inf"})),
        "task.toml",
        "must be > 0",
    ),
    "typo": (
        _set_toml(_toml(**{"timeout_s = 20": "timeout_s = 20\ntimout_s = 5"})),
        "task.toml",
        "'timout_s'",
    ),
    "meta typo": (_set_toml(_toml(**{"[meta]": "[meta]\ntag = 'x'"})), "task.toml", "'meta.tag'"),
    "bad difficulty": (
        _set_toml(_toml(**{'"easy"': '"trivial"'})),
        "task.toml",
        "'meta.difficulty' must be one of",
    ),
    "tags not strings": (
        _set_toml(_toml(**{'["test"]': "[1, 2]"})),
        "task.toml",
        "'meta.tags' must be a list",
    ),
    "meta not a table": (
        _set_toml('id = "x"\ninstruction = "y"\ntimeout_s = 1\nmeta = 3\n'),
        "task.toml",
        "table",
    ),
    "bad glob": (_set_toml(_toml(**{'["tests/**"]': '["../x"]'})), "task.toml", "bad glob '../x'"),
    "protected not a list": (_set_toml(_toml(**{'["tests/**"]': '"tests"'})), "task.toml", "must be a list"),
    "missing repo": (_remove("repo"), "repo", "is missing"),
    "missing tests": (_remove("tests"), "tests", "is missing"),
    "no tests": (_write("tests/test_calc.py", "def helper():\n    pass\n"), "tests", "holds no tests"),
    "test syntax error": (_write("tests/test_calc.py", "def test(:\n"), "tests/test_calc.py", "syntax error"),
    "missing patch": (_remove("solution.patch"), "solution.patch", "is missing"),
    "patch does not apply": (
        _write("solution.patch", BAD_PATCH),
        "solution.patch",
        "does not apply to repo/",
    ),
    "patch is garbage": (_write("solution.patch", "hello\n"), "solution.patch", "no file sections"),
    "patch touches protected": (
        _write("solution.patch", PROTECTED_PATCH),
        "solution.patch",
        "changes protected",
    ),
    "escaping link": (_link("repo/secret", "/etc/passwd"), "repo/secret", "symbolic link that leaves repo/"),
    "relative escaping link": (_link("tests/up", "../../x"), "tests/up", "symbolic link that leaves tests/"),
    "git history": (_write("repo/.git/HEAD", "ref: refs/heads/main\n"), "repo/.git", "without git history"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_tasks_name_file_and_problem(tmp_path: Path, case: str) -> None:
    mutate, relative, problem = MALFORMED[case]
    root = make_task(tmp_path / "t")
    mutate(root)
    with pytest.raises(TaskError) as raised:
        load_task(root)
    assert raised.value.path == root / relative
    assert problem in raised.value.problem
    assert str(raised.value).startswith(str(root / relative))


def test_internal_links_are_allowed(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t")
    os.symlink("calc.py", root / "repo" / "alias.py")
    assert load_task(root).id == "calc-add"


def test_version_is_a_content_hash(tmp_path: Path) -> None:
    a, b = make_task(tmp_path / "a"), make_task(tmp_path / "b")
    assert task_version(a) == task_version(b)  # same content, different place
    (b / "repo" / "__pycache__").mkdir()
    (b / "repo" / "__pycache__" / "calc.cpython-311.pyc").write_bytes(b"junk")
    (b / "repo" / "stray.pyc").write_bytes(b"junk")
    (b / "repo" / "empty-folder").mkdir()
    os.chmod(b / "repo" / "calc.py", 0o755)
    assert task_version(a) == task_version(b)  # caches, empty folders and modes are not content
    (b / "repo" / "calc.py").write_text(SOLVED["calc.py"])
    assert task_version(a) != task_version(b)
    (b / "repo" / "calc.py").write_text(REPO["calc.py"])
    (b / "repo" / "calc.py").rename(b / "repo" / "calc2.py")
    assert task_version(a) != task_version(b)  # a rename is a change


def test_version_counts_links_by_target(tmp_path: Path) -> None:
    a, b = make_task(tmp_path / "a"), make_task(tmp_path / "b")
    os.symlink("calc.py", a / "repo" / "link.py")
    os.symlink("tests/test_visible.py", b / "repo" / "link.py")
    assert task_version(a) != task_version(b)


def test_find_and_load_task_sets(tmp_path: Path) -> None:
    make_task(tmp_path / "set" / "b", task_id="b")
    make_task(tmp_path / "set" / "group" / "a", task_id="a")
    (tmp_path / "set" / ".hidden").mkdir()
    assert find_tasks(tmp_path / "set") == [tmp_path / "set" / "b", tmp_path / "set" / "group" / "a"]
    assert find_tasks(tmp_path / "set" / "b") == [tmp_path / "set" / "b"]
    assert [t.id for t in load_tasks([tmp_path / "set"])] == ["b", "a"]
    make_task(tmp_path / "other" / "b", task_id="b")
    with pytest.raises(TaskError, match="is also used by"):
        load_tasks([tmp_path / "set", tmp_path / "other"])
    with pytest.raises(TaskError, match="is not a folder"):
        find_tasks(tmp_path / "nowhere")


_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1).filter(str.strip)
_IDS = st.lists(_TEXT, min_size=1, max_size=3, unique=True).map(tuple)
_SYNTHESIS = st.builds(
    SynthesisMeta,
    project=_TEXT, version=_TEXT, operator=_TEXT, file=_TEXT, mutation=_TEXT,
    fail_to_pass=_IDS,
    pass_to_pass=st.lists(_TEXT, max_size=3).map(tuple),
).flatmap(
    lambda made: st.lists(_TEXT, max_size=len(made.fail_to_pass), min_size=len(made.fail_to_pass)).map(
        lambda errors: dataclasses.replace(made, errors=tuple(zip(made.fail_to_pass, errors, strict=True)))
    )
)  # fmt: skip
_SPECS = st.builds(
    TaskSpec,
    id=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
    instruction=_TEXT,
    timeout_s=st.floats(min_value=0.001, max_value=86400, allow_nan=False),
    build_command=st.none() | _TEXT,
    protected=st.lists(st.sampled_from(["tests", "tests/**", "*.cfg", "**/conftest.py"]), unique=True).map(
        tuple
    ),
    image=st.none() | _TEXT,
    meta=st.builds(
        TaskMeta,
        difficulty=st.none() | st.sampled_from(["easy", "medium", "hard"]),
        tags=st.lists(_TEXT, max_size=3).map(tuple),
        source=st.none() | _TEXT,
        synthesis=st.none() | _SYNTHESIS,
    ),
)


@given(_SPECS)
def test_spec_toml_round_trips(spec: TaskSpec) -> None:
    assert parse_spec(tomllib.loads(spec_to_toml(spec)), Path("task.toml")) == spec


def test_limits_are_read_checked_and_written_back(tmp_path: Path) -> None:
    from actors.tasks.spec import TaskLimits, parse_spec, spec_to_toml
    from actors.tasks.verify import task_quotas

    data = {
        "id": "t",
        "instruction": "do it",
        "timeout_s": 10,
        "limits": {"memory": "768m", "cpus": 0.5, "pids": 64, "disk": "128m"},
    }
    spec = parse_spec(data, tmp_path / "task.toml")
    assert spec.limits == TaskLimits(memory="768m", cpus=0.5, pids=64, disk="128m")
    assert parse_spec(tomllib.loads(spec_to_toml(spec)), tmp_path / "task.toml") == spec

    quotas = task_quotas(dataclasses.replace(load_task(make_task(tmp_path / "task")), spec=spec))
    assert (quotas.memory_bytes, quotas.cpus, quotas.pids) == (768 << 20, 0.5, 64)
    assert quotas.workspace_bytes == quotas.tmp_bytes == 128 << 20


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({"memory": "lots"}, "limits.memory"),
        ({"pids": 0}, "limits.pids"),
        ({"cpus": True}, "limits.cpus"),
        ({"swap": "1g"}, "limits.swap"),
    ],
)
def test_bad_limits_name_the_field(tmp_path: Path, limits: dict[str, object], problem: str) -> None:
    from actors.tasks.spec import parse_spec

    data = {"id": "t", "instruction": "do it", "timeout_s": 10, "limits": limits}
    with pytest.raises(TaskError, match=problem):
        parse_spec(data, tmp_path / "task.toml")


def test_a_survey_reports_every_problem_and_every_folder_that_is_not_a_task(tmp_path: Path) -> None:
    from actors.tasks.spec import find_task_folders, survey_tasks

    make_task(tmp_path / "set" / "a", task_id="a")
    make_task(tmp_path / "set" / "deeper" / "b", task_id="b")
    make_task(tmp_path / "set" / "twin", task_id="a")  # an id used twice
    (make_task(tmp_path / "set" / "broken", task_id="broken") / "tests" / "test_calc.py").unlink()
    (tmp_path / "set" / "stray" / "inside").mkdir(parents=True)  # no task.toml anywhere below
    (tmp_path / "set" / ".hidden").mkdir()  # dot folders and caches are not task folders: ignored
    (tmp_path / "set" / "__pycache__").mkdir()
    (tmp_path / "empty").mkdir()

    survey = survey_tasks([tmp_path / "set", tmp_path / "empty"])
    assert [task.id for task in survey.tasks] == ["a", "b"] and not survey.ok
    problems = {str(problem.path.relative_to(tmp_path)): problem.problem for problem in survey.problems}
    assert set(problems) == {"empty", "set/broken/tests", "set/stray", "set/twin/task.toml"}
    assert "is also used by" in problems["set/twin/task.toml"]
    assert "task.toml is missing" in problems["set/stray"] and "holds no task" in problems["empty"]
    # `find_tasks` keeps its quiet walk (workers take whatever tasks a folder holds).
    assert find_tasks(tmp_path / "set") == sorted(
        tmp_path / "set" / name for name in ("a", "broken", "deeper/b", "twin")
    )
    assert find_task_folders(tmp_path / "nope")[1][0].problem == "is not a folder"


def test_synthesis_meta_is_checked(tmp_path: Path) -> None:
    synthesis = {
        "project": "toolz", "version": "1.0.0", "operator": "compare", "file": "toolz/itertoolz.py",
        "mutation": "`<` -> `<=`", "fail_to_pass": ["tests/test_a.py::test_x"], "pass_to_pass": [],
    }  # fmt: skip
    data = {"id": "t", "instruction": "do it", "timeout_s": 10, "meta": {"synthesis": synthesis}}
    spec = parse_spec(data, tmp_path / "task.toml")
    assert spec.meta.synthesis is not None and spec.meta.synthesis.file == "toolz/itertoolz.py"
    with pytest.raises(TaskError, match="must name at least one test"):
        parse_spec({**data, "meta": {"synthesis": {**synthesis, "fail_to_pass": []}}}, tmp_path / "task.toml")
    with pytest.raises(TaskError, match="not in fail_to_pass"):
        errors = {"tests/test_a.py::test_y": "boom"}
        parse_spec({**data, "meta": {"synthesis": {**synthesis, "errors": errors}}}, tmp_path / "task.toml")
    with pytest.raises(TaskError, match=r"meta\.synthesis\.seed"):
        parse_spec({**data, "meta": {"synthesis": {**synthesis, "seed": 1}}}, tmp_path / "task.toml")
