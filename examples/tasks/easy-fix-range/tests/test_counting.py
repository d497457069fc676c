from counting import numbers_up_to
from fizzbuzz import fizzbuzz


def test_includes_n():
    assert numbers_up_to(5) == [1, 2, 3, 4, 5]


def test_one():
    assert numbers_up_to(1) == [1]


def test_empty():
    assert numbers_up_to(0) == []
    assert numbers_up_to(-3) == []


def test_fizzbuzz_fifteen():
    words = fizzbuzz(15)
    assert len(words) == 15
    assert words[-1] == "FizzBuzz"
    assert words[:5] == ["1", "2", "Fizz", "4", "Buzz"]
