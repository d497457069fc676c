"""The Kafka source of policy announcements meets the same contract as the in-memory one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from kafka import KafkaProducer

from actors.rollout.weights import KafkaPublications, TorchModelTarget, WeightsWatcher
from learner.publish import store_weights
from learner.testing import tiny_llama
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.publications import PolicyPublished
from schemas.topics import POLICY_VERSIONS
from tests.integration.actors.kafka_helpers import new_run
from tests.publications_contract import check_publications_contract
from tests.unit.actors.requests import fixed_origin
from tests.unit.actors.test_weights import trained_weights


def test_the_kafka_source_meets_the_publications_contract(kafka_bootstrap: str) -> None:
    run = new_run(kafka_bootstrap, "weights")
    codec = default_codec()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    source = KafkaPublications(kafka_bootstrap, run)

    def publish(published: PolicyPublished) -> None:
        producer.send(POLICY_VERSIONS.of(run), value=codec.encode(published)).get(60)

    try:
        check_publications_contract(source, publish)
    finally:
        source.close()
        producer.close()


def test_a_real_hot_swap_refuses_an_absurd_and_a_nan_announcement_then_takes_the_next_good_one(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = new_run(kafka_bootstrap, "weights-bad")
    codec = default_codec()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    store = LocalObjectStore(tmp_path / "objects")
    model = tiny_llama()
    watcher = WeightsWatcher(KafkaPublications(kafka_bootstrap, run), store, TorchModelTarget(model), run)

    def publish(version: int, weights: dict[str, torch.Tensor], /, **changes: Any) -> None:
        published = store_weights(store, weights, origin=fixed_origin("learner"), run_id=run,
                                  version=version, trajectories=4)  # fmt: skip
        value = codec.encode(dataclasses.replace(published, **changes))
        producer.send(POLICY_VERSIONS.of(run), value=value).get(60)

    try:
        before = {n: t.clone() for n, t in model.state_dict().items()}
        publish(1, trained_weights(1), version=2**31 - 1, base_version=2**31 - 2)  # absurd
        poisoned = trained_weights(1)
        poisoned[sorted(poisoned)[0]][0, 0] = float("nan")
        publish(1, poisoned)
        assert watcher.refresh() is None
        assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())
        good = trained_weights(2)
        publish(2, good)
        assert watcher.refresh() == 2
        assert all(torch.equal(model.state_dict()[n], t) for n, t in good.items())
    finally:
        watcher.source.close()  # type: ignore[attr-defined]
        producer.close()
