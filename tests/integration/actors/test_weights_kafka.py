"""The Kafka source of policy announcements meets the same contract as the in-memory one."""

from __future__ import annotations

from kafka import KafkaProducer

from actors.rollout.weights import KafkaPublications
from schemas.codec import default_codec
from schemas.publications import PolicyPublished
from schemas.topics import POLICY_VERSIONS
from tests.integration.actors.kafka_helpers import new_run
from tests.publications_contract import check_publications_contract


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
