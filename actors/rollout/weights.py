"""Hot swap of policy weights on a rollout worker: between requests, load the newest published version.

`WeightsWatcher.refresh()` is called by the worker between two requests (never during one, so an episode's
turn is sampled by one version). It reads the announcements on `policy.versions` that arrived since the
last call, and loads only the HIGHEST new version: intermediate ones are never loaded. The weights come
from the object store, checked against their sha256; a file naming a tensor the model does not have, or
giving one a different shape, is refused (logged, remembered, skipped) and the model keeps its weights.
`pin` fixes the worker to one version (evaluations): only that version is loaded, once it is announced.

Announcements come from a `Publications` source: `KafkaPublications` reads the topic, `MemoryPublications`
is the in-process fake; both pass the same contract test (tests/contracts/publications.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

import torch
from safetensors.torch import load as safetensors_load

from schemas.blobs import BlobIntegrityError, ObjectStore
from schemas.codec import Codec, DecodeError, default_codec
from schemas.publications import PolicyPublished
from schemas.topics import POLICY_VERSIONS
from streams.kafka.reader import LogReader, ReadError

log = logging.getLogger(__name__)
CATCH_UP_S = 10.0


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
    pass


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
        self.refused: set[int] = set()
        self._announced: dict[int, PolicyPublished] = {}

    def refresh(self) -> int | None:
        """Load the highest newly announced version (or the pinned one); the version loaded, or None."""
        for published in self.source.poll():
            if published.run_id == self.run_id:
                self._announced.setdefault(published.version, published)
        for version in sorted(self._wanted(), reverse=True):
            try:
                self._load(self._announced[version])
            except WeightsRefused as exc:
                log.error("refused policy version %d: %s", version, exc)
                self.refused.add(version)
                continue
            self.version = version
            self._announced = {v: p for v, p in self._announced.items() if v > version}
            return version
        return None

    def _wanted(self) -> list[int]:
        if self.pin is not None:
            return [self.pin] if self.pin in self._announced and self.version != self.pin else []
        return [v for v in self._announced if v > self.version and v not in self.refused]

    def _load(self, published: PolicyPublished) -> None:
        try:
            data = self.store.get(published.weights)  # checked against the sha256
        except BlobIntegrityError as exc:
            raise WeightsRefused(str(exc)) from None
        try:
            tensors = safetensors_load(data)
        except Exception as exc:  # safetensors raises its own error types for a malformed file
            raise WeightsRefused(f"not a safetensors file: {exc}") from None
        check_tensors(tensors, self.target.shapes())
        self.target.load(tensors)


def check_tensors(tensors: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """WeightsRefused unless every tensor names one of the target's, with the same shape."""
    unknown = sorted(set(tensors) - set(shapes))
    if unknown:
        raise WeightsRefused(f"unknown tensor(s): {', '.join(unknown[:5])}")
    wrong = [n for n, t in tensors.items() if tuple(t.shape) != tuple(shapes[n])]
    if wrong:
        name = wrong[0]
        raise WeightsRefused(f"{name} has shape {tuple(tensors[name].shape)}, expected {shapes[name]}")
    if not tensors:
        raise WeightsRefused("the file holds no tensor")
