"""Areas and perimeters of squares."""

from shapes import double, square


def square_area(side):
    return square(side)


def square_perimeter(side):
    return double(double(side))
