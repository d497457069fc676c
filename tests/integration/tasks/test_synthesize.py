"""Synthesis end to end in real sandboxes: on a small project this test writes (with a flaky test, a test
that needs a conftest fixture and a function no test reaches), and on a real sdist fetched at set-up."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import docker
import pytest

from actors.tasks.spec import Task, load_task
from actors.tasks.synth.pipeline import Reject, Synthesizer, SynthOptions
from actors.tasks.synth.project import load_project
from actors.tasks.synth.suite import SuiteSandbox
from actors.tasks.synth.writer import find_leaks
from actors.tasks.validate import Admission, validate_task
from actors.tasks.verify import Verification, verify
from ops.paths import Paths
from ops.stack.images import sandbox_ref
from ops.synth_sources import fetch_project
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from schemas.blobs import LocalObjectStore

pytestmark = pytest.mark.integration

REAL_SDIST = ("toolz", "1.2.0")  # fetched into the cache by `make test`'s set-up (ops/test.sh)

CORE = '''"""A tiny library with tests of its own."""


def add(a, b):
    return a + b


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)


def initials(name):
    return "".join(part[0].upper() for part in name.split() if part)


def never_called(x):
    return x * 2 + 1
'''
TESTS = '''import os

from minicalc.core import add, clamp, initials, mean


def test_add():
    """Adding two numbers gives their sum."""
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-2, -3) == -5


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_below():
    assert clamp(-1, 0, 10) == 0


def test_clamp_above():
    assert clamp(11, 0, 10) == 10


def test_clamp_edges():
    assert clamp(0, 0, 10) == 0 and clamp(10, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_of_nothing():
    try:
        mean([])
    except ValueError as error:
        assert "nothing" in str(error)
    else:
        raise AssertionError("mean([]) must raise")


def test_initials():
    assert initials("ada  lovelace") == "AL", "initials of each word, upper-cased"


def test_flaky():
    # Passes every other run in the same sandbox: it must be listed as flaky and never used.
    marker = "/tmp/minicalc-flaky"
    if os.path.exists(marker):
        os.remove(marker)
        assert False, "odd run"
    open(marker, "w").close()


def test_needs_a_conftest_fixture(answer):
    assert answer == 42
'''
# unittest classes where one inherits the other's tests: pytest reports `InitialsAgain::test_two_words`
# too, so a task keeping it must keep (and grade) both.
CASES = """import unittest

from minicalc.core import initials


class InitialsCase(unittest.TestCase):
    def test_two_words(self):
        self.assertEqual(initials("grace hopper"), "GH")


class InitialsAgain(InitialsCase):
    def test_one_word(self):
        self.assertEqual(initials("ada"), "A")
"""
CONFTEST = """import pytest


@pytest.fixture
def answer():
    return 42
"""


def write_project(root: Path) -> Path:
    files = {
        "minicalc/__init__.py": "",
        "minicalc/core.py": CORE,
        "tests/test_core.py": TESTS,
        "tests/test_cases.py": CASES,
        "tests/conftest.py": CONFTEST,
        "setup.py": "from setuptools import setup\nsetup(name='minicalc')\n",
        "README.md": "minicalc: small arithmetic helpers\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return root


@pytest.fixture
def backend(docker_client: docker.DockerClient, tmp_path: Path) -> DockerBackend:
    return DockerBackend(docker_client, LocalObjectStore(tmp_path / "objects"), labels=owned_labels("synth"))


SPEC = SandboxSpec(
    str(sandbox_ref()),
    Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=64 * MIB),
)


def test_a_small_project_gives_valid_tasks_that_leak_nothing(backend: DockerBackend, tmp_path: Path) -> None:
    project = load_project(write_project(tmp_path / "minicalc"), "minicalc", "0.1")
    assert ".git/HEAD" not in project.files
    with SuiteSandbox(backend, SPEC, project, 120) as suite:
        assert suite.shadowed() == {}
        assert suite.image_copies() == []
    out = tmp_path / "tasks"
    options = SynthOptions(seed=7, jobs=1, max_failing=4, baseline_runs=2, pass_to_pass=3)
    report = Synthesizer(project, backend, SPEC, out, options).run()

    assert report.flaky == ("tests/test_core.py::test_flaky",)
    assert report.usable == 12  # all but the flaky one and the one needing the conftest's fixture
    assert report.tried == report.mutants_available > 10
    assert report.rejected[Reject.NOT_REACHED] >= 1  # never_called: no test reaches it
    assert len(report.kept) >= 4
    assert report.tried == len(report.kept) + sum(report.rejected.values())
    failing_sets = set()
    for name in report.kept:
        task = load_task(out / name)
        synthesis = task.spec.meta.synthesis
        assert (
            synthesis is not None and synthesis.project == "minicalc" and synthesis.file == "minicalc/core.py"
        )
        assert 1 <= len(synthesis.fail_to_pass) <= 4
        assert set(task.test_ids) == {
            test.partition("[")[0] for test in [*synthesis.fail_to_pass, *synthesis.pass_to_pass]
        }
        assert set(synthesis.fail_to_pass) <= set(task.test_ids)
        assert "test_flaky" not in " ".join(task.test_ids) and "conftest" not in " ".join(task.test_ids)
        failing_sets.add(frozenset(synthesis.fail_to_pass))
        assert find_leaks(task.root, {"minicalc/core.py": CORE.encode()}) == []
        assert not (task.root / "repo" / ".git").exists()
        for test in synthesis.fail_to_pass:
            assert test.rpartition("::")[2] in task.spec.instruction  # names the failing test
        assert synthesis.mutation not in task.spec.instruction
    assert len(failing_sets) == len(report.kept)  # deduplicated by failing-test set

    # A second run into the same folder (another seed, every mutant again) adds up with the first: the tasks
    # made are not run again, their failing sets are taken, so it keeps nothing the first has.
    again = Synthesizer(project, backend, SPEC, out, replace(options, seed=8)).run()
    assert (again.already_in_out, again.skipped_made) == (len(report.kept), len(report.kept))
    assert again.tried == report.tried - len(report.kept)
    assert again.kept == [] and again.rejected[Reject.DUPLICATE] >= 1
    assert sorted(path.name for path in out.iterdir()) == sorted(report.kept)

    # A task keeping an inherited test keeps the class it comes from, and is valid: the grader reports the
    # very ids the task lists.
    inheriting = [
        task for task in (load_task(out / name) for name in report.kept)
        if "tests/test_cases.py::InitialsAgain::test_two_words" in task.test_ids
    ]  # fmt: skip
    assert inheriting
    assert "tests/test_cases.py::InitialsCase::test_two_words" in inheriting[0].test_ids
    checked = validate_task(
        inheriting[0].root, lambda task, workspace: verify(task, workspace, backend, SPEC), 1
    )
    assert checked.verdict is Admission.VALID, checked.reasons

    # Every written task was validated once with the real grader: one it finds invalid is removed again
    # (here a grader that says every run timed out).
    def timing_out(task: Task, workspace: Path) -> Verification:
        return replace(verify(task, workspace, backend, SPEC), timed_out=True)

    refused = tmp_path / "refused"
    removed = Synthesizer(
        project, backend, SPEC, refused, replace(options, max_tasks=2), grader=timing_out
    ).run()
    assert removed.kept == [] and removed.rejected[Reject.INVALID + "timeout"] == 2
    assert list(refused.iterdir()) == []

    # The grader agrees: the repo as given fails, with the solution it passes.
    task = load_task(out / report.kept[0])
    given = verify(task, task.repo_dir, backend, SPEC)
    solved = verify(task, task.copy_repo(tmp_path / "solved", solved=True), backend, SPEC)
    kept = task.spec.meta.synthesis
    assert kept is not None and kept.pass_to_pass  # passing tests sampled from every usable one
    assert set(given.grade.failed_tests) == set(kept.fail_to_pass)  # exactly those fail; the others pass
    assert solved.grade.verdict.value == "pass"

    # The leak check fails a task with the original planted as a backup.
    planted = tmp_path / "planted"
    shutil.copytree(task.root, planted)
    (planted / "repo" / "minicalc" / "core.py.orig").write_text(CORE)
    assert any(
        "core.py.orig" in problem for problem in find_leaks(planted, {"minicalc/core.py": CORE.encode()})
    )


def test_a_real_sdist_gives_tasks(backend: DockerBackend, tmp_path: Path) -> None:
    name, version = REAL_SDIST
    project = load_project(fetch_project(name, version, Paths.from_env()), name, version)
    assert len(project.modules) > 5 and len(project.tests) > 5
    options = SynthOptions(seed=1, jobs=1, max_tasks=2, max_mutants=30, baseline_runs=2)
    report = Synthesizer(project, backend, SPEC, tmp_path / "tasks", options).run()
    assert report.usable > 100
    assert len(report.kept) >= 1
    for task_name in report.kept:
        task = load_task(tmp_path / "tasks" / task_name)
        assert task.spec.meta.source == f"synthesized:{name}=={version}"


def wheel(folder: Path, name: str, version: str, module: str) -> Path:
    """A pure-Python wheel made here (a wheel is a zip of importable files and its metadata)."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}.py", module)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_tests_needing_a_package_the_image_lacks_run_on_a_layer_built_from_its_wheel(
    backend: DockerBackend, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    from ops.synth_image import ensure_layer, layer_ref

    root = write_project(tmp_path / "minicalc")
    (root / "tests" / "test_with_dep.py").write_text(
        "import helperdep\nfrom minicalc.core import add\n\n\ndef test_add_with_dep():\n"
        "    assert add(helperdep.TWO, 3) == 5\n"
    )
    project = load_project(root, "minicalc", "0.1")
    with SuiteSandbox(backend, SPEC, project, 120) as suite:
        plain = suite.run()
    assert plain.results["tests/test_with_dep.py"].outcome == "collection-error"  # no helperdep here

    dep = wheel(tmp_path, "helperdep", "1.0", "TWO = 2\n")
    image = ensure_layer(docker_client, [dep])
    assert image == str(layer_ref([dep])) and ensure_layer(docker_client, [dep]) == image  # built once
    layered = SandboxSpec(image, SPEC.quotas)
    with SuiteSandbox(backend, layered, project, 120) as suite:
        assert suite.run().results["tests/test_with_dep.py::test_add_with_dep"].passed
        assert suite.shadowed() == {}
    options = SynthOptions(seed=3, jobs=1, max_tasks=1, baseline_runs=2, pass_to_pass=2)
    report = Synthesizer(project, backend, layered, tmp_path / "tasks", options, image=image).run()
    task = load_task(tmp_path / "tasks" / report.kept[0])
    assert task.spec.image == image  # graded on the layer: the hidden tests may import helperdep
