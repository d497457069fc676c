"""Hidden tests cut to the chosen ones, by source spans (what stays reads as the project wrote it)."""

from __future__ import annotations

from pathlib import Path

from actors.tasks.synth.hidden import cut_tests, needed_tests
from actors.tasks.testids import names_of_tests

SOURCE = """import pytest
from lib import add


def helper():
    return 1


def test_a():
    assert add(1, 1) == 2


@pytest.mark.parametrize("x", [1, 2])
def test_b(x):
    assert add(x, 0) == x


class TestC:
    def test_one(self):
        assert helper() == 1

    def test_two(self):
        assert True is not False


class Things(unittest.TestCase):
    def test_u(self):
        self.assertEqual(add(0, 0), 0)


def test_calls_a():
    test_a()
"""


def names(source: str) -> list[str]:
    return list(names_of_tests(source, Path("t.py")))


def test_only_the_kept_tests_stay_with_every_helper_and_import() -> None:
    cut = cut_tests(SOURCE, {"test_b", "TestC::test_two"})
    assert names(cut) == ["test_b", "TestC::test_two"]
    assert "def helper():" in cut and "from lib import add" in cut
    assert "@pytest.mark.parametrize" in cut  # the kept test's decorator stays
    assert cut.count("@pytest.mark") == 1


def test_a_removed_test_takes_its_decorators_and_a_class_left_empty_goes() -> None:
    cut = cut_tests(SOURCE, {"test_a"})
    assert names(cut) == ["test_a"]
    assert "parametrize" not in cut and "class TestC" not in cut and "class Things" not in cut


def test_unittest_classes_of_any_name_are_cut_like_test_classes() -> None:
    assert names(SOURCE).count("Things::test_u") == 1
    assert names(cut_tests(SOURCE, {"Things::test_u"})) == ["Things::test_u"]


def test_tests_called_by_a_kept_test_are_needed() -> None:
    assert needed_tests(SOURCE, {"test_calls_a"}) == {"test_calls_a", "test_a"}
    assert needed_tests(SOURCE, {"test_b"}) == {"test_b"}
