from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from actors.rollout.simple_policies import RandomPolicy
from actors.rollout.weights import MemoryPublications, TorchModelTarget, WeightsWatcher
from actors.rollout.worker import RolloutWorker
from learner.lora import Adaptation, adapt, merged_weights
from learner.publish import store_weights, weights_bytes
from learner.testing import tiny_llama
from schemas.blobs import BlobRef, LocalObjectStore, MemoryObjectStore, ObjectStore
from streams.telemetry import metrics
from tests.publications_contract import check_publications_contract
from tests.unit.actors.requests import fixed_origin, policy_request, request_meta

RUN = "run-w"
IDS = torch.tensor([[1, 50, 51, 52]])


def test_the_memory_source_meets_the_publications_contract() -> None:
    source = MemoryPublications()
    check_publications_contract(source, source.publish)


def trained_weights(seed: int) -> dict[str, torch.Tensor]:
    """What a learner publishes: merged q/v weights after some (here: random) LoRA update."""
    model = tiny_llama()
    adapt(model, Adaptation(rank=4))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("lora_b"):
                p.copy_(torch.randn(p.shape, generator=generator))
    return merged_weights(model)


class Rig:
    def __init__(self, pin: int | None = None, store: ObjectStore | None = None) -> None:
        self.store: Any = store if store is not None else MemoryObjectStore()
        self.source = MemoryPublications()
        self.model = tiny_llama()
        self.watcher = WeightsWatcher(self.source, self.store, TorchModelTarget(self.model), RUN, pin=pin)
        self.weights: dict[int, dict[str, torch.Tensor]] = {}

    def publish(
        self, version: int, weights: dict[str, torch.Tensor] | None = None, run_id: str = RUN
    ) -> None:
        weights = weights if weights is not None else trained_weights(version)
        self.weights[version] = weights
        published = store_weights(
            self.store,
            weights,
            origin=fixed_origin("learner"),
            run_id=run_id,
            version=version,
            trajectories=4,
        )
        self.source.publish(published)

    def holds(self, version: int) -> bool:
        state = self.model.state_dict()
        return all(torch.equal(state[name], t) for name, t in self.weights[version].items())


def test_only_the_highest_new_version_is_loaded() -> None:
    rig = Rig()
    assert rig.watcher.refresh() is None
    rig.publish(1)
    rig.publish(2)
    rig.publish(3)
    loads: list[int] = []
    load = rig.watcher.target.load
    rig.watcher.target.load = lambda tensors: (loads.append(1), load(tensors))  # type: ignore[method-assign]
    assert rig.watcher.refresh() == 3
    assert loads == [1]  # versions 1 and 2 were never loaded
    assert rig.holds(3)
    assert rig.watcher.version == 3
    assert rig.watcher.refresh() is None
    rig.publish(4)
    assert rig.watcher.refresh() == 4 and rig.holds(4)


def test_another_runs_versions_are_ignored() -> None:
    rig = Rig()
    rig.publish(5, run_id="someone-else")
    assert rig.watcher.refresh() is None
    assert rig.watcher.version == 0


def test_weights_with_unknown_names_or_shapes_are_refused_and_the_next_best_is_taken() -> None:
    rig = Rig()
    rig.publish(1)
    good = {n: t.clone() for n, t in rig.model.state_dict().items()}
    rig.publish(2, {"model.layers.0.self_attn.q_proj.weight": torch.zeros(3, 3)})  # wrong shape
    rig.publish(3, {"model.no_such_layer.weight": torch.zeros(2)})  # unknown name
    assert rig.watcher.refresh() == 1
    assert rig.watcher.refused == {2, 3}
    assert rig.holds(1)
    assert any(not torch.equal(good[n], t) for n, t in rig.model.state_dict().items())
    assert rig.watcher.refresh() is None  # refused versions are not retried


def test_weights_whose_bytes_do_not_match_their_sha256_are_refused() -> None:
    rig = Rig()
    rig.publish(1)
    [published] = rig.source._log
    forged = BlobRef("0" * 64, published.weights.size)
    tampered = dataclasses.replace(published, version=2, base_version=1, weights=forged)
    rig.source.publish(tampered)
    rig.store.blobs["0" * 64] = weights_bytes(trained_weights(9))
    assert rig.watcher.refresh() == 1
    assert rig.watcher.refused == {2}


def test_a_pinned_watcher_loads_its_version_and_nothing_else() -> None:
    rig = Rig(pin=2)
    rig.publish(1)
    assert rig.watcher.refresh() is None
    rig.publish(2)
    rig.publish(3)
    assert rig.watcher.refresh() == 2
    assert rig.holds(2)
    rig.publish(4)
    assert rig.watcher.refresh() is None
    assert rig.watcher.version == 2


def test_the_rollout_worker_loads_new_weights_between_requests_and_records_their_version() -> None:
    rig = Rig()
    worker = RolloutWorker(RandomPolicy(), fixed_origin("rollout"), weights=rig.watcher)
    first = worker.handle(policy_request(meta=request_meta(step=0)))
    assert first.meta.policy_version == 0  # the base weights, whatever version the request named
    rig.publish(1)
    rig.publish(2)
    second = worker.handle(policy_request(meta=request_meta(step=1)))
    assert second.meta.policy_version == 2 and rig.holds(2)


# -- refusals: a bad announcement or file leaves the model as it was, and the worker serving ---------------


class Counted:
    enabled = True

    def __init__(self) -> None:
        self.refused: list[str] = []

    def add(self, instrument: str, value: float = 1, attributes: Any = None) -> None:
        if instrument == metrics.WEIGHTS_REFUSED:
            self.refused.append(attributes["reason"])

    def record(self, instrument: str, value: float, attributes: Any = None) -> None:
        pass

    def gauge(self, instrument: str, read: Any) -> None:
        pass

    def shutdown(self) -> None:
        pass


@pytest.fixture
def counted() -> Any:
    mine = Counted()
    previous = metrics.install(mine)
    yield mine
    metrics.install(previous)


def local_rig(tmp_path: Path, pin: int | None = None) -> Rig:
    return Rig(pin=pin, store=LocalObjectStore(tmp_path / "objects"))


def announce(rig: Rig, version: int, /, **changes: Any) -> None:
    """Publish real weights for `version`, then announce them with `changes` made to the announcement."""
    rig.publish(version)
    published = rig.source._log.pop()
    rig.source.publish(dataclasses.replace(published, **changes))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"version": -3, "base_version": -4}, "version_not_positive"),
        ({"version": 0, "base_version": -1}, "version_not_positive"),
        ({"base_version": 0}, "base_version_mismatch"),  # version 2 claiming to follow the base
        ({"version": 2**31 - 1, "base_version": 2**31 - 2}, "version_jump"),
        ({"version": 5, "base_version": 4}, "version_jump"),  # 1 was the highest: 5 skips three
        ({"weights": BlobRef("../../etc/passwd", 10)}, "malformed_blob_ref"),
        ({"weights": BlobRef("", 10)}, "malformed_blob_ref"),
    ],
)
def test_an_absurd_announcement_is_refused_before_its_weights_are_read(
    tmp_path: Path, counted: Counted, changes: dict[str, Any], reason: str
) -> None:
    rig = local_rig(tmp_path)
    rig.publish(1)
    assert rig.watcher.refresh() == 1
    announce(rig, 2, **changes)
    assert rig.watcher.refresh() is None
    assert rig.watcher.version == 1 and rig.holds(1)
    assert counted.refused == [reason]
    rig.publish(2)  # the learner's own version 2 still gets through
    assert rig.watcher.refresh() == 2 and rig.holds(2)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_weights_with_a_non_finite_value_are_refused(tmp_path: Path, counted: Counted, bad: float) -> None:
    rig = local_rig(tmp_path)
    rig.publish(1)
    assert rig.watcher.refresh() == 1
    poisoned = trained_weights(2)
    name = sorted(poisoned)[-1]
    poisoned[name] = poisoned[name].clone()
    poisoned[name][0, 0] = bad
    rig.publish(2, poisoned)
    assert rig.watcher.refresh() is None
    assert rig.watcher.refused == {2} and counted.refused == ["non_finite"]
    assert rig.holds(1)
    assert all(bool(torch.isfinite(t).all()) for t in rig.model.state_dict().values())
    rig.publish(3)  # the next good version: 3 follows 2, which was announced (if refused)
    assert rig.watcher.refresh() == 3 and rig.holds(3)


def test_weights_of_an_integer_dtype_are_refused(tmp_path: Path, counted: Counted) -> None:
    rig = local_rig(tmp_path)
    name, shape = next(iter(rig.watcher.target.shapes().items()))
    rig.publish(1, {name: torch.zeros(shape, dtype=torch.int64)})
    assert rig.watcher.refresh() is None and counted.refused == ["wrong_dtype"]


def test_a_missing_or_unreadable_blob_is_refused(tmp_path: Path, counted: Counted) -> None:
    rig = local_rig(tmp_path)
    announce(rig, 1, weights=BlobRef("ab" * 32, 10))  # well formed, not in the store
    assert rig.watcher.refresh() is None
    rig.store.put(b"not safetensors at all", "application/octet-stream")
    ref = BlobRef.of(b"not safetensors at all", "application/octet-stream")
    announce(rig, 2, weights=ref)
    assert rig.watcher.refresh() is None
    assert counted.refused == ["blob_integrity", "not_safetensors"]
    assert rig.watcher.version == 0


def test_a_forged_announcement_does_not_hide_the_learners_own_of_the_same_version(
    tmp_path: Path, counted: Counted
) -> None:
    rig = local_rig(tmp_path)
    poisoned = trained_weights(1)
    poisoned[sorted(poisoned)[0]][0, 0] = float("nan")
    rig.publish(1, poisoned)
    rig.publish(1)  # a second announcement of 1, with good weights
    assert rig.watcher.refresh() == 1 and rig.holds(1)
    assert counted.refused == ["non_finite"]


def test_another_runs_announcement_is_ignored_however_absurd(tmp_path: Path, counted: Counted) -> None:
    rig = local_rig(tmp_path)
    announce(rig, 1, run_id="someone-else", version=10**9, base_version=0)
    assert rig.watcher.refresh() is None and counted.refused == []


def test_a_pinned_version_may_be_any_published_one_but_is_still_checked(
    tmp_path: Path, counted: Counted
) -> None:
    rig = local_rig(tmp_path, pin=7)
    rig.publish(1)
    rig.publish(7)  # far ahead of 1: a jump, but the operator asked for it
    assert rig.watcher.refresh() == 7 and rig.holds(7)
    bad = local_rig(tmp_path, pin=3)
    announce(bad, 3, base_version=1)
    assert bad.watcher.refresh() is None and counted.refused == ["base_version_mismatch"]


def test_a_failing_source_or_hot_swap_costs_no_request(tmp_path: Path) -> None:
    rig = local_rig(tmp_path)

    def broken() -> list[Any]:
        raise RuntimeError("broker on fire")

    rig.source.poll = broken  # type: ignore[method-assign]
    assert rig.watcher.refresh() is None
    worker = RolloutWorker(RandomPolicy(), fixed_origin("rollout"), weights=rig.watcher)
    rig.watcher.refresh = lambda: (_ for _ in ()).throw(RuntimeError("bug"))  # type: ignore[method-assign]
    answer = worker.handle(policy_request(meta=request_meta(step=0)))
    assert answer.meta.policy_version == 0
