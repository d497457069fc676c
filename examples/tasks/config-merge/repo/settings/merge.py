"""Merging configuration dicts."""


def deep_merge(base, override):
    """Return base updated with override, merging nested dicts."""
    base.update(override)
    return base
