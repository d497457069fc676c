"""Every Kafka client trialog makes (kafka-python's producer, consumer and admin client, and the Faust app's
broker settings) is built here, so that one place decides what all of them share:

* the brokers: `bootstrap` is one `host:port` or several separated by commas (a cluster); the same code
  talks to one broker or three;
* durability: every producer made here waits for all in-sync replicas (`acks=all`) and is idempotent, so a
  retried send after a broker failover is written once (with `min.insync.replicas=2` on replicated topics,
  an acknowledged record survives the loss of any one broker). The streams worker's Faust producer is
  acks=all but not idempotent: aiokafka's idempotent producer does not recover its sequence numbers after
  a refused send, and fails every later send to that partition (OutOfOrderSequenceNumber; the rows
  contract test's refused write showed it); a send it retries twice is a repeat the owner ignores;
* security: SASL and TLS settings are passed through from the environment (`Security.from_env`), read
  once per process and checked before any client is made, so a typo fails at start with the variable's
  name instead of as a connection that never authenticates.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
ENV_PREFIX = "TRIALOG_KAFKA_"


class KafkaConfigError(ValueError):
    """A Kafka client setting from the environment is not usable (the message names the variable)."""


@dataclass(frozen=True, slots=True)
class Security:
    """How clients authenticate and encrypt; the defaults are a plaintext loopback broker's."""

    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Security:
        """From `TRIALOG_KAFKA_SECURITY_PROTOCOL`, `..._SASL_MECHANISM`, `..._SASL_USERNAME`,
        `..._SASL_PASSWORD`, `..._SSL_CAFILE`, `..._SSL_CERTFILE` and `..._SSL_KEYFILE`; checked."""
        source = os.environ if env is None else env
        values = {f.name: source.get(ENV_PREFIX + f.name.upper(), "").strip() for f in fields(cls)}
        values["security_protocol"] = values["security_protocol"].upper() or "PLAINTEXT"
        values["sasl_mechanism"] = values["sasl_mechanism"].upper()
        security = cls(**values)
        security.check()
        return security

    def check(self) -> None:
        name = ENV_PREFIX + "SECURITY_PROTOCOL"
        if self.security_protocol not in PROTOCOLS:
            raise KafkaConfigError(f"{name}={self.security_protocol} is not one of {', '.join(PROTOCOLS)}")
        sasl = self.security_protocol.startswith("SASL_")
        if sasl:
            if self.sasl_mechanism not in MECHANISMS:
                raise KafkaConfigError(
                    f"{name}={self.security_protocol} needs {ENV_PREFIX}SASL_MECHANISM, one of "
                    f"{', '.join(MECHANISMS)} (got {self.sasl_mechanism or 'nothing'})"
                )
            for field in ("sasl_username", "sasl_password"):
                if not getattr(self, field):
                    raise KafkaConfigError(
                        f"{name}={self.security_protocol} needs {ENV_PREFIX}{field.upper()}"
                    )
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password:
            raise KafkaConfigError(
                f"SASL settings are given but {name} is {self.security_protocol}: "
                "use SASL_PLAINTEXT or SASL_SSL"
            )
        tls = self.security_protocol in ("SSL", "SASL_SSL")
        for field in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(self, field)
            if path and not tls:
                raise KafkaConfigError(
                    f"{ENV_PREFIX}{field.upper()} is given but {name} is {self.security_protocol}: "
                    "use SSL or SASL_SSL"
                )
            if path and not os.path.isfile(path):
                raise KafkaConfigError(f"{ENV_PREFIX}{field.upper()}={path}: no such file")
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise KafkaConfigError(f"{ENV_PREFIX}SSL_CERTFILE and {ENV_PREFIX}SSL_KEYFILE go together")

    def kafka_python(self) -> dict[str, Any]:
        """kafka-python's keyword arguments (the same for producer, consumer and admin client)."""
        settings: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.security_protocol.startswith("SASL_"):
            settings.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if self.security_protocol in ("SSL", "SASL_SSL"):
            settings["ssl_check_hostname"] = True
            for field in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
                if getattr(self, field):
                    settings[field] = getattr(self, field)
        return settings

    def faust_credentials(self) -> Any:
        """The Faust app's `broker_credentials` (None for plaintext)."""
        if self.security_protocol == "PLAINTEXT":
            return None
        import ssl

        import faust

        context = None
        if self.security_protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=self.ssl_cafile or None)
            if self.ssl_certfile:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        if self.security_protocol == "SSL":
            return faust.SSLCredentials(context)
        return faust.SASLCredentials(
            username=self.sasl_username,
            password=self.sasl_password,
            ssl_context=context,
            mechanism=self.sasl_mechanism,
        )


@cache
def security() -> Security:
    """This process's settings, read from the environment once."""
    return Security.from_env()


def servers(bootstrap: str) -> list[str]:
    """`host:port[,host:port...]` as a list; an empty entry is an error, not a default broker."""
    hosts = [part.strip() for part in bootstrap.split(",")]
    if not hosts or any(not host or ":" not in host for host in hosts):
        raise KafkaConfigError(f"bootstrap {bootstrap!r}: want host:port, or several separated by commas")
    return hosts


def faust_broker(bootstrap: str) -> str:
    """The Faust app's `broker` URL list for `bootstrap` (Faust separates URLs with ';')."""
    return ";".join(f"kafka://{host}" for host in servers(bootstrap))


def producer(bootstrap: str, **settings: Any) -> Any:
    """A producer that waits for every in-sync replica and is idempotent (a retry is written once)."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=servers(bootstrap),
        **{"acks": "all", "enable_idempotence": True, **security().kafka_python(), **settings},
    )


def consumer(bootstrap: str, *topics: str, **settings: Any) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(
        *topics, bootstrap_servers=servers(bootstrap), **{**security().kafka_python(), **settings}
    )


def admin(bootstrap: str, **settings: Any) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=servers(bootstrap), **{**security().kafka_python(), **settings})
