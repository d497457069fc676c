"""Totals of lists of numbers, built on calc."""

from calc import add


def total(values):
    """Return the sum of all values (0 for an empty list)."""
    result = 0
    for value in values:
        result = add(result, value)
    return result
