"""A one-line description of a list of numbers."""

from stats import largest, mean, smallest


def describe(values):
    return f"min={smallest(values)} max={largest(values)} mean={mean(values):.1f}"
