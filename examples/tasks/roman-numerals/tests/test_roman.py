import pytest
from convert import convert
from roman import from_roman, to_roman


@pytest.mark.parametrize(
    ("number", "numeral"),
    [(1, "I"), (4, "IV"), (9, "IX"), (14, "XIV"), (40, "XL"), (90, "XC"), (400, "CD"), (1994, "MCMXCIV")],
)
def test_known_numerals(number, numeral):
    assert to_roman(number) == numeral


def test_round_trip():
    for number in range(1, 4000):
        assert from_roman(to_roman(number)) == number


def test_largest():
    assert to_roman(3999) == "MMMCMXCIX"


def test_out_of_range():
    with pytest.raises(ValueError):
        to_roman(0)
    with pytest.raises(ValueError):
        to_roman(4000)


def test_convert():
    assert convert("2024") == "MMXXIV"
    assert convert("mmxxiv") == "2024"
