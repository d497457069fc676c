from calc import add, multiply
from totals import total


def test_add_positive():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-4, 1) == -3


def test_add_zero():
    assert add(0, 0) == 0


def test_multiply_still_works():
    assert multiply(3, 4) == 12


def test_total():
    assert total([1, 2, 3, 4]) == 10
    assert total([]) == 0
