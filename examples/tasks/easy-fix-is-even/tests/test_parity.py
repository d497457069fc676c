from filters import evens
from parity import is_even


def test_even_numbers():
    assert is_even(0)
    assert is_even(2)
    assert is_even(-4)


def test_odd_numbers():
    assert not is_even(1)
    assert not is_even(-7)


def test_evens():
    assert evens([1, 2, 3, 4, 5, 6]) == [2, 4, 6]
    assert evens([]) == []
