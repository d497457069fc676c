"""Picking releases."""

import functools

from semver import compare


def sort_versions(versions):
    return sorted(versions, key=functools.cmp_to_key(compare))


def latest(versions):
    return sort_versions(versions)[-1]
