"""Static findings on hidden tests: one small task per kind, honest shapes that must not be flagged, and the
example tasks."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

import pytest

from actors.tasks.reward import Grade, Verdict
from actors.tasks.spec import Task, load_task
from actors.tasks.static_checks import Finding, FindingKind, check_task, repo_modules
from actors.tasks.validate import Admission, validate_task
from actors.tasks.verify import Verification
from ops.cli.grading import print_validations
from ops.cli.tasks import register
from ops.paths import REPO_ROOT

from .helpers import TWO_TEST_MODULES, make_task, write_tree


def findings(tmp_path: Path, tests: Mapping[str, str]) -> list[Finding]:
    return list(check_task(load_task(make_task(tmp_path / "task", tests=tests))))


def kinds(found: list[Finding]) -> set[tuple[str, FindingKind]]:
    return {(finding.test_id.split("::", 1)[1], finding.kind) for finding in found}


def test_an_honest_test_has_no_finding(tmp_path: Path) -> None:
    assert (
        findings(
            tmp_path, {"test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"}
        )
        == []
    )


def test_the_honest_shapes_of_the_helpers_have_no_finding(tmp_path: Path) -> None:
    assert findings(tmp_path, TWO_TEST_MODULES) == []


def test_no_assertion(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import pytest\nfrom calc import add\n\n"
                "def check(value):\n    assert value == 5\n\n"
                "def test_silent():\n    add(2, 3)\n\n"
                "def test_through_a_helper():\n    check(add(2, 3))\n\n"
                "def test_raises():\n    with pytest.raises(TypeError):\n        add(1)\n\n"
                "class TestCase:\n    def test_mock(self):\n        self.assertEqual(add(1, 1), 2)\n"
            )
        },
    )
    assert kinds(found) == {("test_silent", FindingKind.NO_ASSERTION)}
    (silent,) = found
    assert silent.test_id == "tests/test_calc.py::test_silent" and silent.line == 7
    assert silent.file == "tests/test_calc.py" and "nothing in the test can fail it" in silent.text


def test_no_code_under_test(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import calc\nimport pytest\n\n"
                "@pytest.fixture\ndef adder():\n    return calc.add\n\n"
                "def test_alone():\n    assert 2 + 3 == 5\n\n"
                "def test_by_fixture(adder):\n    assert adder(2, 3) == 5\n\n"
                "def test_by_module():\n    assert calc.add(2, 3) == 5\n\n"
                "def test_by_string():\n    import importlib\n"
                "    assert importlib.import_module('calc').add(1, 1) == 2\n"
            ),
            "test_other.py": "def test_nothing_imported():\n    assert [1] * 2 == [1, 1]\n",
        },
    )
    assert kinds(found) == {
        ("test_alone", FindingKind.NO_CODE_UNDER_TEST),
        ("test_nothing_imported", FindingKind.NO_CODE_UNDER_TEST),
    }
    assert all("calc" in finding.text for finding in found)


def test_network(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import urllib.request\nfrom calc import add\n\n"
                "def fetch():\n    return urllib.request.urlopen('http://127.0.0.1:1')\n\n"
                "def test_fetch():\n    assert add(fetch().status, 0) == 200\n\n"
                "def test_socket():\n    import socket\n    assert add(1, 1) == 2\n\n"
                "def test_offline():\n    assert add(1, 1) == 2\n"
            )
        },
    )
    assert kinds(found) == {("test_fetch", FindingKind.NETWORK), ("test_socket", FindingKind.NETWORK)}
    fetch = next(f for f in found if f.test_id.endswith("test_fetch"))
    assert fetch.line == 5 and "urllib.request.urlopen" in fetch.text and "helper fetch" in fetch.text


def test_sleep(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import asyncio\nfrom time import sleep\nfrom calc import add\n\n"
                "def test_sleeps():\n    sleep(0.1)\n    assert add(1, 1) == 2\n\n"
                "async def test_async():\n    await asyncio.sleep(0)\n    assert add(1, 1) == 2\n"
            )
        },
    )
    assert kinds(found) == {("test_sleeps", FindingKind.SLEEP), ("test_async", FindingKind.SLEEP)}
    assert {f.line for f in found} == {6, 10}


def test_wall_clock(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import datetime\nimport time\nfrom datetime import date\nfrom calc import add\n\n"
                "def test_now():\n    assert add(datetime.datetime.now().year, 0) > 2000\n\n"
                "def test_today():\n    assert add(date.today().day, 0) > 0\n\n"
                "def test_time():\n    assert add(time.time(), 0) > 0\n\n"
                "def test_a_fixed_time():\n    assert add(time.gmtime(0).tm_year, 0) == 1970\n\n"
                "def test_duration():\n    start = time.monotonic()\n    assert add(1, 1) == 2\n"
                "    assert time.monotonic() >= start\n"
            )
        },
    )
    assert kinds(found) == {
        ("test_now", FindingKind.WALL_CLOCK),
        ("test_today", FindingKind.WALL_CLOCK),
        ("test_time", FindingKind.WALL_CLOCK),
    }


def test_unseeded_random(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import os\nimport random\nfrom calc import add\n\n"
                "def test_draw():\n    x = random.randint(0, 9)\n    assert add(x, 0) == x\n\n"
                "def test_own_generator():\n"
                "    x = random.Random(4).randint(0, 9)\n    assert add(x, 0) == x\n\n"
                "def test_fresh_generator():\n    x = random.Random().random()\n    assert add(x, 0) == x\n\n"
                "def test_urandom():\n    assert add(os.urandom(1)[0], 0) >= 0\n"
            ),
            "test_seeded.py": (
                "import random\nfrom calc import add\n\nrandom.seed(7)\n\n"
                "def test_seeded_draw():\n    x = random.choice([1, 2])\n    assert add(x, 0) == x\n"
            ),
        },
    )
    assert kinds(found) == {
        ("test_draw", FindingKind.UNSEEDED_RANDOM),
        ("test_fresh_generator", FindingKind.UNSEEDED_RANDOM),
        ("test_urandom", FindingKind.UNSEEDED_RANDOM),
    }


def test_numpy_randomness_needs_a_seed(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "test_calc.py": (
                "import numpy as np\nfrom calc import add\n\n"
                "def test_global():\n    assert add(np.random.rand(), 0) < 1\n\n"
                "def test_rng():\n    assert add(np.random.default_rng(3).random(), 0) < 1\n\n"
                "def test_fresh_rng():\n    assert add(np.random.default_rng().random(), 0) < 1\n"
            )
        },
    )
    assert kinds(found) == {
        ("test_global", FindingKind.UNSEEDED_RANDOM),
        ("test_fresh_rng", FindingKind.UNSEEDED_RANDOM),
    }


def test_an_autouse_fixture_in_conftest_counts_for_every_test(tmp_path: Path) -> None:
    found = findings(
        tmp_path,
        {
            "conftest.py": (
                "import time\nimport pytest\n\n"
                "@pytest.fixture(autouse=True)\ndef slow():\n    time.sleep(1)\n"
            ),
            "test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n",
        },
    )
    (slow,) = found
    assert slow.kind is FindingKind.SLEEP and slow.file == "tests/conftest.py" and slow.line == 6
    assert "autouse fixture slow" in slow.text


def test_repo_modules_are_the_top_level_code(tmp_path: Path) -> None:
    repo = write_tree(
        tmp_path / "repo",
        {
            "calc.py": "",
            "conftest.py": "",
            "test_visible.py": "",
            "pkg/__init__.py": "",
            "tests/test_x.py": "",
            "src/lib/core.py": "",
            "data/notes.txt": "",
        },
    )
    assert repo_modules(repo) == {"calc", "pkg", "lib"}


@pytest.mark.parametrize(
    "folder", sorted(p.name for p in (REPO_ROOT / "examples" / "tasks").iterdir() if p.is_dir())
)
def test_the_example_tasks_have_no_finding(folder: str) -> None:
    # examples/tasks/README.md: none uses the network, the clock or randomness; each test checks repo/.
    assert check_task(load_task(REPO_ROOT / "examples" / "tasks" / folder)) == ()


# -- in `trialog tasks validate` ----------------------------------------------------------------------------


def _fake_verifier(task: Task, workspace: Path) -> Verification:
    """repo/ as given fails its one test, the solved tree passes (read from calc.py, nothing run)."""
    solved = "a + b" in (workspace / "calc.py").read_text()
    failed = () if solved else task.test_ids
    verdict = Verdict.PASS if solved else Verdict.FAIL
    grade = Grade(
        1.0 if solved else -0.2, verdict, len(task.test_ids) - len(failed), len(task.test_ids), failed
    )
    return Verification(grade, 0.1, expected=task.test_ids, reported=task.test_ids, complete=True)


SLEEPY = {
    "test_calc.py": (
        "import time\nfrom calc import add\n\ndef test_add():\n    time.sleep(0)\n    assert add(2, 3) == 5\n"
    )
}


def test_findings_are_warnings_unless_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = make_task(tmp_path / "task", tests=SLEEPY)
    warned = validate_task(folder, _fake_verifier, runs=1)
    assert warned.verdict is Admission.VALID
    assert [(f.kind, f.line) for f in warned.findings] == [(FindingKind.SLEEP, 5)]
    assert warned.to_json()["findings"] == [
        {"test": "tests/test_calc.py::test_add", "kind": "sleep", "file": "tests/test_calc.py", "line": 5,
         "text": "calls time.sleep()"}
    ]  # fmt: skip
    print_validations([warned])
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "valid            calc-add",
        "  finding        sleep: tests/test_calc.py::test_add (tests/test_calc.py:5) calls time.sleep()",
    ]

    strict = validate_task(folder, _fake_verifier, runs=1, strict_tests=True)
    assert strict.verdict is Admission.WEAK_TESTS and strict.runs == ()
    assert "1 static finding on the hidden tests (--strict-tests): sleep" in strict.reasons[0]
    clean = validate_task(make_task(tmp_path / "clean"), _fake_verifier, runs=1, strict_tests=True)
    assert clean.verdict is Admission.VALID and clean.findings == ()


def test_validate_cli_takes_strict_tests(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="trialog")
    register(parser.add_subparsers(dest="command", required=True))
    for name in ("validate", "publish"):
        assert parser.parse_args(["tasks", name, ".", "--strict-tests"]).strict_tests is True
        assert parser.parse_args(["tasks", name, "."]).strict_tests is False
    with pytest.raises(SystemExit):
        parser.parse_args(["tasks", "validate", "--help"])
    assert "--strict-tests" in capsys.readouterr().out
