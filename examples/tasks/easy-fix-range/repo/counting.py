"""Counting helpers."""


def numbers_up_to(n):
    """Return the list [1, 2, ..., n]; an empty list when n < 1."""
    return list(range(1, n))
