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


INHERITING = """import unittest


class Base(unittest.TestCase):
    def setUp(self):
        self.x = 1

    def test_one(self):
        assert self.x == 1

    def test_two(self):
        assert self.x


class Sub(Base):
    def test_three(self):
        assert self.x


class Mixin:
    def test_mixed(self):
        assert True

    def test_other(self):
        assert True


class TestWithMixin(Mixin):
    def test_own(self):
        assert True
"""


def test_a_kept_inherited_test_keeps_its_base_class_and_function() -> None:
    cut = cut_tests(INHERITING, {"Sub::test_one"})
    # Base stays (Sub derives from it) with the function Sub runs; Base reports it too, the writer adds it
    assert names(cut) == ["Base::test_one", "Sub::test_one"] and "class Sub(Base):\n    pass\n" in cut
    assert "def setUp" in cut and "test_two" not in cut and "test_three" not in cut
    assert "class TestWithMixin" not in cut and "class Mixin" in cut  # a helper class is never dropped


def test_a_mixin_keeps_only_the_test_methods_kept_tests_inherit() -> None:
    cut = cut_tests(INHERITING, {"TestWithMixin::test_mixed"})
    assert names(cut) == ["TestWithMixin::test_mixed"]
    assert "test_other" not in cut and "class Base" not in cut and "class Sub" not in cut
    compile(cut, "cut.py", "exec")


def test_a_needed_class_left_without_members_keeps_one() -> None:
    source = (
        "class TestA:\n    def test_a(self):\n        pass\n\n\n"
        "class TestB(TestA):\n    def test_a(self):\n        pass\n"
    )
    cut = cut_tests(source, {"TestB::test_a"})
    compile(cut, "cut.py", "exec")  # TestA must stay (TestB derives from it) and cannot be empty
    assert names(cut) == ["TestB::test_a"] and "class TestA:\n    pass\n" in cut
