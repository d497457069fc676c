"""Filtering lists of integers."""

from parity import is_even


def evens(numbers):
    """Return the even numbers, in order."""
    return [n for n in numbers if is_even(n)]
