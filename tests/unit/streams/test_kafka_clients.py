"""The one place Kafka clients are made: security settings from the environment, checked; brokers as a
list; every producer acks=all and idempotent; topic durability from the cluster's size."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.kafka import clients
from streams.kafka.clients import KafkaConfigError, Security
from streams.kafka.topics import Durability


def test_plaintext_by_default() -> None:
    assert Security.from_env({}) == Security()
    assert Security.from_env({}).kafka_python() == {"security_protocol": "PLAINTEXT"}
    assert Security.from_env({}).faust_credentials() is None


def test_sasl_settings_pass_through_to_the_clients() -> None:
    env = {
        "TRIALOG_KAFKA_SECURITY_PROTOCOL": "sasl_plaintext",
        "TRIALOG_KAFKA_SASL_MECHANISM": "scram-sha-512",
        "TRIALOG_KAFKA_SASL_USERNAME": "trainer",
        "TRIALOG_KAFKA_SASL_PASSWORD": "s3cret",
    }
    settings = Security.from_env(env).kafka_python()
    assert settings == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "trainer",
        "sasl_plain_password": "s3cret",
    }
    credentials = Security.from_env(env).faust_credentials()
    assert (credentials.username, credentials.password) == ("trainer", "s3cret")


def test_tls_files_must_exist_and_go_with_a_tls_protocol(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read until a connection is made")
    env = {"TRIALOG_KAFKA_SECURITY_PROTOCOL": "SSL", "TRIALOG_KAFKA_SSL_CAFILE": str(ca)}
    assert Security.from_env(env).kafka_python()["ssl_cafile"] == str(ca)
    with pytest.raises(KafkaConfigError, match=r"TRIALOG_KAFKA_SSL_CAFILE=.*no such file"):
        Security.from_env({**env, "TRIALOG_KAFKA_SSL_CAFILE": str(tmp_path / "missing.pem")})
    with pytest.raises(KafkaConfigError, match="use SSL or SASL_SSL"):
        Security.from_env({"TRIALOG_KAFKA_SSL_CAFILE": str(ca)})
    with pytest.raises(KafkaConfigError, match="go together"):
        Security.from_env({**env, "TRIALOG_KAFKA_SSL_CERTFILE": str(ca)})


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TRIALOG_KAFKA_SECURITY_PROTOCOL": "TLS"}, "is not one of"),
        ({"TRIALOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs TRIALOG_KAFKA_SASL_MECHANISM"),
        (
            {"TRIALOG_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TRIALOG_KAFKA_SASL_MECHANISM": "PLAIN"},
            "needs TRIALOG_KAFKA_SASL_USERNAME",
        ),
        ({"TRIALOG_KAFKA_SASL_USERNAME": "u"}, "use SASL_PLAINTEXT or SASL_SSL"),
    ],
)
def test_unusable_security_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaConfigError, match=message):
        Security.from_env(env)


def test_brokers_are_a_comma_separated_list() -> None:
    assert clients.servers("127.0.0.1:9092") == ["127.0.0.1:9092"]
    assert clients.servers("127.0.0.1:9092, 127.0.0.1:9094") == ["127.0.0.1:9092", "127.0.0.1:9094"]
    assert clients.faust_broker("a:1,b:2") == "kafka://a:1;kafka://b:2"
    for bad in ("", "a:1,", "nohost"):
        with pytest.raises(KafkaConfigError, match="want host:port"):
            clients.servers(bad)


def test_every_producer_waits_for_all_replicas_and_is_idempotent(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[dict[str, object]] = []

    class Recording:
        def __init__(self, **settings: object) -> None:
            made.append(settings)

    import kafka

    monkeypatch.setattr(kafka, "KafkaProducer", Recording)
    clients.producer("127.0.0.1:1,127.0.0.1:2", linger_ms=5)
    assert made == [
        {
            "bootstrap_servers": ["127.0.0.1:1", "127.0.0.1:2"],
            "acks": "all",
            "enable_idempotence": True,
            "security_protocol": "PLAINTEXT",
            "linger_ms": 5,
        }
    ]


@pytest.mark.parametrize(
    ("brokers", "replication", "min_insync"), [(1, 1, 1), (2, 2, 1), (3, 3, 2), (5, 3, 2)]
)
def test_topics_are_replicated_by_the_cluster_size(brokers: int, replication: int, min_insync: int) -> None:
    durability = Durability.for_brokers(brokers)
    assert (durability.replication, durability.min_insync) == (replication, min_insync)
    assert durability.topic_configs() == {"min.insync.replicas": str(min_insync)}
