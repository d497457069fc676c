"""Scratch folders that name their owner, and a sweeper that removes those of owners that are gone.

A `tempfile.TemporaryDirectory` is removed when its `with` block ends, never when its process is SIGKILLed:
a verifier killed mid-grading leaves a task copy and a restored workspace in /tmp each time, and /tmp fills
over weeks of crashes. `owned_temp_dir` makes the same folder with the owner (`sandbox_agent.owner`) in its
name, `PREFIX@OWNER@RANDOM`; `sweep` (run at every worker's start) removes the folders of owners judged
dead. A live owner's folder is never removed, nor a folder of another host or pid namespace (a shared /tmp
across containers), nor anything that is not a plain folder with such a name directly in the root (a
link named like one is left alone: the sweeper must not be steered into removing something else).
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from sandbox_agent.owner import Liveness, Owner, Processes, ProcProcesses, current, judge

log = logging.getLogger(__name__)

SCRATCH_PREFIX = "trialog-"
MARK = "@"


def owned_temp_dir(prefix: str, dir: str | Path | None = None) -> tempfile.TemporaryDirectory[str]:
    """A `tempfile.TemporaryDirectory` whose name carries this process as owner (a drop-in replacement:
    `with owned_temp_dir(prefix="trialog-verify-") as scratch:`)."""
    me = current()
    marked = prefix if me is None else f"{prefix}{MARK}{me.text()}{MARK}"
    return tempfile.TemporaryDirectory(prefix=marked, dir=dir)


def owner_of(name: str) -> Owner | None:
    """The owner written in a scratch folder's name; None for any other name."""
    if not name.startswith(SCRATCH_PREFIX):
        return None
    first, last = name.find(MARK), name.rfind(MARK)
    if first < 0 or last <= first:
        return None
    return Owner.parse(name[first + 1 : last])


def dead_folders(names: list[str], here: Owner, processes: Processes) -> list[str]:
    """The names (of entries of one folder) that are scratch folders of owners judged dead from `here`."""
    found = []
    for name in names:
        owner = owner_of(name)
        if owner is not None and owner != here and judge(owner, here, processes) is Liveness.DEAD:
            found.append(name)
    return found


def sweep(root: Path | None = None, *, here: Owner | None = None, processes: Processes | None = None) -> int:
    """Remove the scratch folders of dead owners directly under `root` (default: the temp folder); returns
    how many were removed. Errors are logged, never raised: a worker starts even if its clean-up fails."""
    folder = Path(root or tempfile.gettempdir())
    me = here or current()
    if me is None:
        return 0
    try:
        names = [name for name in os.listdir(folder) if name.startswith(SCRATCH_PREFIX)]
    except OSError as exc:
        log.warning("scratch sweep: cannot list %s: %s", folder, exc)
        return 0
    removed = 0
    for name in dead_folders(names, me, processes or ProcProcesses()):
        path = folder / name
        try:
            if not stat.S_ISDIR(path.lstat().st_mode):
                continue
            shutil.rmtree(path, onerror=_writable_then_retry)
        except OSError as exc:
            log.warning("scratch sweep: cannot remove %s: %s", path, exc)
            continue
        removed += 1
    if removed:
        log.info("scratch sweep: removed %d folders of dead owners under %s", removed, folder)
    return removed


def _writable_then_retry(function: object, path: str, _info: object) -> None:
    """A read-only folder inside (a task's files keep their modes) stops rmtree: make it writable, retry."""
    parent = os.path.dirname(path)
    os.chmod(parent, stat.S_IRWXU)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, stat.S_IRWXU)
        shutil.rmtree(path, onerror=_give_up)
    else:
        os.unlink(path)


def _give_up(_function: object, path: str, info: object) -> None:
    raise OSError(f"cannot remove {path}: {info}")
