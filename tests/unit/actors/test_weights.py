from __future__ import annotations

import dataclasses

import torch

from actors.rollout.simple_policies import RandomPolicy
from actors.rollout.weights import MemoryPublications, TorchModelTarget, WeightsWatcher
from actors.rollout.worker import RolloutWorker
from learner.lora import Adaptation, adapt, merged_weights
from learner.publish import store_weights, weights_bytes
from learner.testing import tiny_llama
from schemas.blobs import BlobRef, MemoryObjectStore
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
    def __init__(self, pin: int | None = None) -> None:
        self.store = MemoryObjectStore()
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
    tampered = dataclasses.replace(published, version=2, weights=BlobRef("0" * 64, published.weights.size))
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
