"""Semantic versions: MAJOR.MINOR.PATCH[-PRERELEASE]."""


def parse(text):
    """Return (major, minor, patch, prerelease identifiers) for a version string."""
    core, _, pre = text.partition("-")
    major, minor, patch = core.split(".")
    return major, minor, patch, pre.split(".") if pre else []


def compare(a, b):
    """Return -1, 0 or 1 as version a is lower than, equal to or higher than version b."""
    if a == b:
        return 0
    return -1 if a < b else 1
