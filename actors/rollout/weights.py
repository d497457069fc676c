"""Hot swap of policy weights on a rollout worker: between requests, load the newest published version.

`WeightsWatcher.refresh()` is called by the worker between two requests (never during one, so an episode's
turn is sampled by one version). It reads the announcements on `policy.versions` that arrived since the
last call, and loads only the HIGHEST new version: intermediate ones are never loaded. The weights come
from the object store, checked against their sha256; a file naming a tensor the model does not have, or
giving one a different shape, a non-floating dtype or a NaN/Inf value, is refused (logged, counted in
`trialog.weights.refused`, remembered by version and sha256, skipped) and the model keeps its weights.
`pin` fixes the worker to one version (evaluations): only that version is loaded, once it is announced.

Anything on `policy.versions` is treated as possibly hostile or corrupt (`implausible`). The learner
announces 1, 2, 3, ... on a one-partition, never-expiring topic: it trains version v+1 only once v is
announced (`learner.learner`), and a restarted learner continues from its checkpoint, re-announcing the
checkpointed version only if the topic lacks it (`learner.publish.announce_once`). So an honest
announcement has `version >= 1`, `base_version == version - 1`, a 64-hex sha256, and a version at most one
above the highest plausible one before it in the log. Anything else is refused before its weights are read:
a negative or zero version, a broken base, a jump (version 10**9 after 3). A version at or below the one
held is not refused, just not loaded (old news). `pin` is exempt from the jump rule only: an operator may
pin any published version, still checked for run, base, blob and values.

Announcements come from a `Publications` source: `KafkaPublications` reads the topic, `MemoryPublications`
is the in-process fake; both pass the same contract test (tests/contracts/publications.py).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Protocol

import torch
from safetensors.torch import load as safetensors_load

from schemas.blobs import BlobIntegrityError, ObjectStore
from schemas.codec import Codec, DecodeError, default_codec
from schemas.publications import PolicyPublished
from schemas.topics import POLICY_VERSIONS
from streams.kafka.reader import LogReader, ReadError
from streams.telemetry import metrics

log = logging.getLogger(__name__)
CATCH_UP_S = 10.0
# The most a version may exceed the highest plausible one announced before it: the learner never leaves a gap.
MAX_VERSION_STEP = 1
_SHA256 = re.compile(r"[0-9a-f]{64}")


def implausible(published: PolicyPublished, highest: int | None = None) -> str | None:
    """Why `published` cannot be an announcement of the learner (a stable reason code), or None.

    `highest`: the highest plausible version announced before it on the topic (0: none yet); None skips the
    jump rule (a pinned version, or a reader that only needs the record to be well formed)."""
    if published.version < 1:
        return "version_not_positive"
    if published.base_version != published.version - 1:
        return "base_version_mismatch"
    if not _SHA256.fullmatch(published.weights.sha256) or published.weights.size <= 0:
        return "malformed_blob_ref"
    if highest is not None and published.version > highest + MAX_VERSION_STEP:
        return "version_jump"
    return None


def refused(reason: str, source: str = "rollout") -> None:
    """Count a refused announcement or weights file (`trialog.weights.refused`)."""
    metrics.weights_refused(reason, source)


class Publications(Protocol):
    def poll(self) -> list[PolicyPublished]:
        """Announcements published since the previous call (all of them on the first), oldest first."""
        ...


class MemoryPublications:
    def __init__(self) -> None:
        self._log: list[PolicyPublished] = []
        self._read = 0

    def publish(self, published: PolicyPublished) -> None:
        self._log.append(published)

    def poll(self) -> list[PolicyPublished]:
        new, self._read = self._log[self._read :], len(self._log)
        return new


class KafkaPublications:
    """Reads `policy.versions` of a run from its beginning; each `poll` catches up to the topic's end as it
    was when the call started (`streams.kafka.reader.LogReader`), waiting at most `CATCH_UP_S` for records
    that do not come: the worker polls between requests and must not hang on a slow broker."""

    def __init__(self, bootstrap: str, run: str = "", codec: Codec | None = None) -> None:
        self.topic = POLICY_VERSIONS.of(run)
        self.codec = codec or default_codec()
        self._reader = LogReader(bootstrap, [self.topic])

    def poll(self) -> list[PolicyPublished]:
        found: list[PolicyPublished] = []
        try:
            for record in self._reader.to_end(timeout_s=CATCH_UP_S):
                published = self._decode(record.value)
                if published is not None:
                    found.append(published)
        except ReadError as exc:  # the rest comes with the next poll
            log.warning("%s: caught up partly (%s)", self.topic, exc)
        return found

    def _decode(self, value: bytes | None) -> PolicyPublished | None:
        try:
            return None if value is None else self.codec.decode_as(value, PolicyPublished)
        except DecodeError as exc:
            log.warning("skipping an unreadable record on %s: %s", self.topic, exc)
            return None

    def close(self) -> None:
        self._reader.close()


class WeightsTarget(Protocol):
    """What receives the weights: a torch model here; a vLLM engine implements the same two methods."""

    def shapes(self) -> Mapping[str, tuple[int, ...]]: ...

    def load(self, tensors: Mapping[str, torch.Tensor]) -> None: ...


class TorchModelTarget:
    def __init__(self, model: Any) -> None:
        self.model = model

    def shapes(self) -> Mapping[str, tuple[int, ...]]:
        return {name: tuple(t.shape) for name, t in self.model.state_dict().items()}

    def load(self, tensors: Mapping[str, torch.Tensor]) -> None:
        state = self.model.state_dict()  # tensors sharing the parameters' storage: copy_ updates the model
        with torch.no_grad():
            for name, tensor in tensors.items():
                state[name].copy_(tensor)


class WeightsRefused(Exception):
    def __init__(self, detail: str, reason: str = "bad_weights") -> None:
        super().__init__(detail)
        self.reason = reason


class WeightsWatcher:
    def __init__(
        self,
        source: Publications,
        store: ObjectStore,
        target: WeightsTarget,
        run_id: str,
        *,
        version: int = 0,
        pin: int | None = None,
    ) -> None:
        self.source = source
        self.store = store
        self.target = target
        self.run_id = run_id
        self.version = version  # the version the target holds now
        self.pin = pin
        # The versions of which every announcement was refused (each candidate by its sha256 in `_tried`).
        self.refused: set[int] = set()
        self._tried: set[tuple[int, str]] = set()
        self._highest = 0  # the highest plausible version announced so far (the jump rule's reference)
        # Candidates per version, oldest first: a forged announcement must not hide the learner's own.
        self._announced: dict[int, list[PolicyPublished]] = {}

    def refresh(self) -> int | None:
        """Load the highest newly announced version (or the pinned one); the version loaded, or None.
        Never raises: the worker calls it between requests and must keep serving with the weights it has."""
        try:
            polled = self.source.poll()
        except Exception:  # a broken source must not stop the worker: the next call polls again
            log.exception("could not read policy announcements; keeping version %d", self.version)
            return None
        for published in polled:
            self._consider(published)
        for version in sorted(self._wanted(), reverse=True):
            if self._try(version):
                self.version = version
                self._announced = {v: c for v, c in self._announced.items() if v > version}
                return version
        return None

    def _consider(self, published: PolicyPublished) -> None:
        if published.run_id != self.run_id:
            return  # the contract: a source returns every run's announcements, the watcher filters
        pinned = published.version == self.pin
        reason = implausible(published, None if pinned else self._highest)
        if reason is not None:
            log.warning("refused an announcement of version %d: %s", published.version, reason)
            refused(reason)
            return
        self._highest = max(self._highest, published.version)
        self._announced.setdefault(published.version, []).append(published)

    def _try(self, version: int) -> bool:
        """Load the first acceptable candidate of `version`; False when all of them are refused."""
        for published in self._announced[version]:
            key = (version, published.weights.sha256)
            if key in self._tried:
                continue
            self._tried.add(key)
            try:
                self._load(published)
            except WeightsRefused as exc:
                log.warning("refused policy version %d (%s): %s", version, exc.reason, exc)
                refused(exc.reason)
                continue
            except Exception:  # a bug or a file the checks missed: keep serving, say so loudly
                log.exception("failed to load policy version %d", version)
                refused("load_error")
                continue
            return True
        self.refused.add(version)
        return False

    def _wanted(self) -> list[int]:
        if self.pin is not None:
            return [self.pin] if self.pin in self._announced and self.version != self.pin else []
        return [v for v in self._announced if v > self.version and v not in self.refused]

    def _load(self, published: PolicyPublished) -> None:
        try:
            data = self.store.get(published.weights)  # checked against the sha256
        except (BlobIntegrityError, OSError) as exc:
            raise WeightsRefused(str(exc), "blob_integrity") from None
        try:
            tensors = safetensors_load(data)
        except Exception as exc:  # safetensors raises its own error types for a malformed file
            raise WeightsRefused(f"not a safetensors file: {exc}", "not_safetensors") from None
        check_tensors(tensors, self.target.shapes())
        self.target.load(tensors)


def check_tensors(tensors: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """WeightsRefused unless every tensor names one of the target's, with the same shape, a floating dtype
    (loading casts it to the model's) and only finite values.

    Finiteness: one NaN in a q projection turns every later activation into NaN, and sampling from NaN
    logits fails or yields garbage for every episode the worker serves. It is checked on each tensor's sum
    (NaN or Inf anywhere makes it non-finite; a finite sum that overflows float32 would mean absurd weights
    anyway): SmolLM2-135M's merged q/v weights (13.3 M values) cost 19 ms on 2 CPU threads, against
    285-630 ms for `torch.isfinite(t).all()` (a bool tensor per weight); the tiny test model, 0.03 ms."""
    if not tensors:
        raise WeightsRefused("the file holds no tensor", "no_tensor")
    unknown = sorted(set(tensors) - set(shapes))
    if unknown:
        raise WeightsRefused(f"unknown tensor(s): {', '.join(unknown[:5])}", "unknown_tensor")
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(shapes[name]):
            raise WeightsRefused(
                f"{name} has shape {tuple(tensor.shape)}, expected {shapes[name]}", "wrong_shape"
            )
        if not tensor.is_floating_point():
            raise WeightsRefused(f"{name} has dtype {tensor.dtype}, not a floating one", "wrong_dtype")
        if not bool(torch.isfinite(tensor.sum(dtype=torch.float32))):
            raise WeightsRefused(f"{name} holds NaN or infinite values", "non_finite")
