"""Reading nested data with dotted paths."""


def get(data, path, default=None):
    """Return the value at the dotted path in data, or default when there is none."""
    raise NotImplementedError
