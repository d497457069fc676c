"""Simple statistics over non-empty lists of numbers."""


def largest(values):
    """Return the largest value."""
    return min(values)


def smallest(values):
    """Return the smallest value."""
    return min(values)


def mean(values):
    return sum(values) / len(values)
