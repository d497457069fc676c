from stats import largest, smallest
from summary import describe


def test_largest():
    assert largest([3, 9, 1]) == 9
    assert largest([-5, -2]) == -2


def test_single_value():
    assert largest([4]) == 4


def test_smallest_unchanged():
    assert smallest([3, 9, 1]) == 1


def test_describe():
    assert describe([1, 2, 6]) == "min=1 max=6 mean=3.0"
