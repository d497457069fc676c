from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from actors.tasks.testids import TestFileError, discover_test_ids, may_have_instances

from .helpers import write_tree

SOURCE = """
import pytest


def helper():
    pass


def test_plain():
    pass


async def test_async():
    pass


@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    pass


def test_plain():  # redefined: pytest collects it once
    pass


class TestGroup:
    def test_method(self):
        pass

    def not_a_test(self):
        pass

    class TestNested:
        def test_inner(self):
            pass


class TestWithInit:
    def __init__(self):
        pass

    def test_never_collected(self):
        pass


class Helper:
    def test_not_in_a_test_class(self):
        pass
"""


def test_ids_follow_pytest_defaults(tmp_path: Path) -> None:
    write_tree(
        tmp_path / "tests",
        {
            "test_a.py": SOURCE,
            "sub/b_test.py": "def test_b():\n    pass\n",
            "helpers.py": "def test_ignored():\n    pass\n",
            "conftest.py": "def test_ignored():\n    pass\n",
            "__pycache__/test_cached.py": "def test_ignored():\n    pass\n",
        },
    )
    assert discover_test_ids(tmp_path, tmp_path / "tests") == (
        "tests/sub/b_test.py::test_b",
        "tests/test_a.py::test_plain",
        "tests/test_a.py::test_async",
        "tests/test_a.py::test_param",
        "tests/test_a.py::TestGroup::test_method",
        "tests/test_a.py::TestGroup::TestNested::test_inner",
    )


def test_syntax_errors_name_the_file(tmp_path: Path) -> None:
    write_tree(tmp_path / "tests", {"test_bad.py": "def test_x(:\n"})
    with pytest.raises(TestFileError) as raised:
        discover_test_ids(tmp_path, tmp_path / "tests")
    assert raised.value.path == tmp_path / "tests" / "test_bad.py"
    assert "syntax error at line 1" in str(raised.value)


def test_brackets_in_paths_are_refused(tmp_path: Path) -> None:
    write_tree(tmp_path / "tests", {"test_[x].py": "def test_x():\n    pass\n"})
    with pytest.raises(TestFileError, match="may not contain"):
        discover_test_ids(tmp_path, tmp_path / "tests")


@pytest.mark.parametrize(
    "source",
    [
        "import pytest\n@pytest.mark.parametrize('n', [1, 2])\ndef test_a(n): pass\n",
        "from pytest import mark\nP = mark.parametrize\n@P('n', [1])\ndef test_a(n): pass\n",
        "def pytest_generate_tests(metafunc): metafunc.parametrize('n', [1])\ndef test_a(n): pass\n",
        "import pytest\n@pytest.fixture(params=[1, 2])\ndef n(request): return request.param\n"
        "def test_a(n): pass\n",
    ],
)
def test_sources_that_can_parametrize_need_a_collection(tmp_path: Path, source: str) -> None:
    write_tree(tmp_path, {"tests/test_a.py": "def test_plain(): pass\n", "tests/helpers/more.py": source})
    assert may_have_instances(tmp_path / "tests")


def test_plain_tests_need_no_collection(tmp_path: Path) -> None:
    write_tree(tmp_path, {"tests/test_a.py": "def test_a():\n    assert 1 + 1 == 2\n"})
    assert not may_have_instances(tmp_path / "tests")


INHERITING = """
import unittest


class Base(unittest.TestCase):
    def setUp(self):
        self.x = 1

    def test_one(self):
        pass

    def test_two(self):
        pass


class Sub(Base):  # a TestCase through Base: pytest collects Base's tests again, as Sub's
    def test_two(self):  # overrides Base's: collected once, as Sub's own
        pass

    test_one = None  # hides the inherited test: not collected


class Mixin:
    def test_mixed(self):
        pass


class TestWithMixin(Mixin):
    def test_own(self):
        pass


class TestA:
    def test_a(self):
        pass


class TestB(TestA):
    pass


class HasInit:
    def __init__(self):
        pass


class TestInheritsInit(HasInit):  # pytest refuses it: its __init__ is HasInit's
    def test_never(self):
        pass


class Other(ImportedBase):  # a base from another file cannot be read: only its own Test-named rules apply
    def test_unseen(self):
        pass
"""


def test_classes_collect_the_tests_they_inherit_from_the_same_file(tmp_path: Path) -> None:
    write_tree(tmp_path, {"tests/test_inherit.py": INHERITING})
    names = [test_id.partition("::")[2] for test_id in discover_test_ids(tmp_path, tmp_path / "tests")]
    assert names == [
        "Base::test_one",
        "Base::test_two",
        "Sub::test_two",
        "TestWithMixin::test_own",
        "TestWithMixin::test_mixed",
        "TestA::test_a",
        "TestB::test_a",
    ]


def test_the_ids_of_inherited_tests_are_those_pytest_reports(tmp_path: Path) -> None:
    source = INHERITING.replace("(ImportedBase)", "")
    write_tree(tmp_path, {"tests/test_inherit.py": source})
    static = set(discover_test_ids(tmp_path, tmp_path / "tests"))
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    reported = {line for line in collected.stdout.splitlines() if "::" in line}
    assert reported == static
