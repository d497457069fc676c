from area import square_area, square_perimeter
from shapes import square


def test_square_of_integers():
    assert square(3) == 9
    assert square(0) == 0
    assert square(-4) == 16


def test_square_of_float():
    assert square(1.5) == 2.25


def test_area_uses_square():
    assert square_area(7) == 49


def test_perimeter():
    assert square_perimeter(3) == 12
