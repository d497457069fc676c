"""Comparisons of the frozen tests' asserts, as rewritten by `actors.tasks.asserts` (run in the sandbox).

`assert result == expected` becomes `assert __import__("trialog_guard").eq(result, expected)` (and `in`
likewise), on the same lines. A value that compares equal to a fresh `object()` is equal to everything
(an always-true `__eq__`, `mock.ANY`): the comparison is then false, and the evidence goes to the
harness's audit hook as a tamper signal. The module is loaded by the launcher before its framework
snapshot, so replacing `eq` (or this module in sys.modules) is itself a recorded change.

What remains possible: a value that is equal to everything except objects it can recognise as our probe
(it sees the probe's type, `object`, and could special-case it); `!=`, `<`, `is` and truthiness checks are
not guarded (an always-false `__ne__` or a truthy object passes `assert x != y` or `assert x`).
"""

from __future__ import annotations

import sys
from typing import Any


def _describe(value: object) -> str:
    try:
        cls = type(value)
        return f"{cls.__module__}.{cls.__qualname__}"
    except Exception:  # a hostile metaclass: the type's name is not worth a crash
        return "an object"


_audit = sys.audit  # a module attribute: covered by the harness's snapshot (replacing it is recorded)


def _everything(value: object, probe: Any) -> bool:
    try:
        equal = bool(value == probe) or bool(probe == value)
    except Exception:
        return False
    if equal:
        _audit("trialog.tamper", f"a value of type {_describe(value)} compares equal to everything")
    return equal


def eq(left: object, right: object, _object: type = object) -> bool:
    if not bool(left == right):
        return False
    return not (_everything(left, _object()) or _everything(right, _object()))


def contains(item: object, container: Any, _object: type = object) -> bool:
    if not bool(item in container):
        return False
    if _everything(item, _object()):
        return False
    try:
        everything = bool(_object() in container)
    except Exception:
        return True
    if everything:
        _audit("trialog.tamper", f"a container of type {_describe(container)} contains everything")
    return not everything
