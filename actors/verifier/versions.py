"""The versions a grade names (`schemas.versions.GradeVersions`), computed the same way by the verifier
(which names them in every RewardAssigned) and by `run start` (which pins them in RunPinned).

* **verifier**: sha256 over the code that decides a grade (the harness that runs in the sandbox, the
  grading, reward, tamper and workspace rules: the `actors.tasks` and `actors.verifier` packages, file by
  file, ignoring caches), the grading rules' identity (`VERIFIER_ID`) and the worker's grading settings (a
  fault injected for a drill is a setting: a verifier that grades otherwise is another version).
* **image**: the engine's content id of the image the tests ran in (`sha256:...`); its reference when the
  engine has none to give.
* **tests**: sha256 of the task's hidden tests folder (the same hash rule as the task version, on tests/
  alone): the part of a task that decides the reward, named apart so that a changed test suite is seen as
  such even where a task version is re-used.
* **reward_config**: the reward configuration's version (`actors.tasks.reward_config`: the sha256 of its
  canonical content; the default is the brief's rule).

Hashing the package folders over-approximates the grader (a change to an unrelated module of
`actors.tasks` also makes a new version): a false "version changed" costs an alert, a missed one a run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from actors.tasks.reward_config import DEFAULT as DEFAULT_REWARD
from actors.tasks.reward_config import RewardConfig
from actors.tasks.spec import Task, task_version
from schemas.versions import GradeVersions

log = logging.getLogger(__name__)

_ACTORS = Path(__file__).resolve().parent.parent
GRADER_PACKAGES = (_ACTORS / "tasks", _ACTORS / "verifier")
"""The code a grade depends on (the harness under actors/tasks/harness included)."""


@functools.cache
def _code_hash() -> str:
    digest = hashlib.sha256(b"trialog-verifier-code-v1\0")
    for package in GRADER_PACKAGES:
        digest.update(package.name.encode() + b"\0" + task_version(package).encode())
    return digest.hexdigest()


def verifier_version(verifier_id: str, settings: Mapping[str, str] | None = None) -> str:
    """The version of the verifier: its code, its rules' id, its grading settings."""
    digest = hashlib.sha256(b"trialog-verifier-v1\0")
    digest.update(_code_hash().encode() + b"\0" + verifier_id.encode() + b"\0")
    digest.update(json.dumps(dict(settings or {}), sort_keys=True).encode())
    return digest.hexdigest()


def tests_version(task: Task) -> str:
    """The version of the task's hidden tests."""
    return task_version(task.tests_dir)


class ImageIds:
    """The engine's content id of an image reference, looked up again after `ttl_s`: an image rebuilt under
    the same reference mid-run is seen within that time. A failed lookup names the reference itself."""

    def __init__(self, lookup: Callable[[str], str], now: Callable[[], float], ttl_s: float = 30.0) -> None:
        self.lookup = lookup
        self.now = now
        self.ttl_s = ttl_s
        self._known: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, ref: str) -> str:
        with self._lock:
            known = self._known.get(ref)
            if known is not None and self.now() - known[0] < self.ttl_s:
                return known[1]
        try:
            found = self.lookup(ref)
        except Exception:  # an engine hiccup must not fail the grade: the reference is the weaker name
            log.warning("cannot look up the id of image %s; naming it by reference", ref, exc_info=True)
            found = f"ref:{ref}"
        with self._lock:
            self._known[ref] = (self.now(), found)
        return found


class Versioner:
    """The `GradeVersions` of a grade of `task` in `image` (None: the task's own, else the default)."""

    def __init__(
        self,
        verifier: str,
        image_ids: Callable[[str], str],
        default_image: str,
        reward: RewardConfig = DEFAULT_REWARD,
    ) -> None:
        self.verifier = verifier
        self.image_ids = image_ids
        self.default_image = default_image
        self.reward_config = reward.version
        self._tests: dict[str, str] = {}  # task version -> tests version

    def image_ref(self, task: Task, image: str | None) -> str:
        return image or task.spec.image or self.default_image

    def __call__(self, task: Task, image: str | None) -> GradeVersions:
        tests = self._tests.get(task.version)
        if tests is None:
            tests = self._tests[task.version] = tests_version(task)
        return GradeVersions(
            self.verifier, self.image_ids(self.image_ref(task, image)), tests, self.reward_config
        )
