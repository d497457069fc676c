"""Small geometry helpers."""


def square(x):
    """Return x multiplied by itself."""
    raise NotImplementedError


def double(x):
    """Return twice x."""
    return 2 * x
