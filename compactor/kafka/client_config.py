"""The ``kafka.*`` settings: Java client keys translated, then checked by librdkafka itself.

Spark and Kafka users bring Java client settings. Those with a librdkafka equivalent are
translated (a JAAS line for PLAIN or SCRAM becomes ``sasl.username``/``sasl.password``; an
empty ``ssl.endpoint.identification.algorithm`` becomes ``none``); the others are refused with
the librdkafka key to use. Then librdkafka validates every key and value by building a
consumer that joins nothing and connects nowhere, so a typo stops the start with exit code 2
and one line naming the key, instead of a traceback when the first client is created.
Secret values never appear in those lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException

from compactor.exceptions import ConfigError
from compactor.kafka.clients import with_logger

SECRET_WORDS = ("password", "secret", "token", "key.pem", "private", "credential", "jaas",
                # object storage: AWS_ACCESS_KEY_ID, AZURE_STORAGE_ACCOUNT_KEY, SAS keys, ...
                "access_key", "account_key", "sas_key", "service_account_key")

# Java client keys librdkafka does not know, and what to set instead.
JAVA_ONLY = {
    "ssl.truststore.location": "kafka.ssl.ca.location with the CA certificates as a PEM file "
    "(keytool -exportcert -rfc -keystore TRUSTSTORE exports one)",
    "ssl.truststore.password": "nothing: a PEM CA file (kafka.ssl.ca.location) has none",
    "ssl.truststore.type": "kafka.ssl.ca.location with a PEM file",
    "sasl.login.callback.handler.class": "kafka.sasl.oauthbearer.method=oidc and the "
    "kafka.sasl.oauthbearer.* keys (librdkafka runs no Java callbacks)",
    "sasl.client.callback.handler.class": "kafka.sasl.oauthbearer.* (no Java callbacks)",
    "fetch.max.wait.ms": "kafka.fetch.wait.max.ms",
    "max.poll.records": "nothing: the mirror consumes in batches of its own",
    "max.poll.interval.ms": "nothing: the mirror joins no consumer group",
    "default.api.timeout.ms": "kafka.socket.timeout.ms",
}
_JAAS = re.compile(r"^\s*(?P<module>[\w.$]+)\s+(?:required|requisite|sufficient|optional)"
                   r"(?P<options>.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')
_MECHANISMS = {"PlainLoginModule": ("PLAIN",), "ScramLoginModule": ("SCRAM-SHA-256",
                                                                    "SCRAM-SHA-512")}


def is_secret(key: str) -> bool:
    """Keys whose values are never printed: passwords, tokens, private keys, JAAS lines."""
    lowered = key.lower()
    return any(word in lowered for word in SECRET_WORDS)


def redacted(key: str, value: str) -> str:
    """What may be printed of ``key``'s value: the value, or ``[redacted]`` for a secret."""
    return "[redacted]" if is_secret(key) else value


def _jaas(value: str, mechanism: str | None) -> dict[str, str]:
    match = _JAAS.match(value)
    module = match.group("module").rsplit(".", 1)[-1] if match else ""
    if match is None or module not in _MECHANISMS:
        raise ConfigError(
            "kafka.sasl.jaas.config", "[redacted]",
            f"uses the JAAS login module {module or '(unreadable)'}, which librdkafka cannot "
            "run", "for PLAIN or SCRAM give kafka.sasl.username and kafka.sasl.password; for "
            "Kerberos kafka.sasl.kerberos.*; for OAUTHBEARER kafka.sasl.oauthbearer.*")
    if mechanism is not None and mechanism.upper() not in _MECHANISMS[module]:
        raise ConfigError("kafka.sasl.mechanism", mechanism,
                          f"does not match the JAAS login module {module}",
                          f"use one of {', '.join(_MECHANISMS[module])}")
    options = {m.group(1): m.group(2) if m.group(2) is not None else m.group(3)
               for m in _JAAS_OPTION.finditer(match.group("options"))}
    if "username" not in options or "password" not in options:
        raise ConfigError("kafka.sasl.jaas.config", "[redacted]",
                          "must give username=\"...\" and password=\"...\"")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def translate_java_keys(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` (without the ``kafka.`` prefix) with Java client keys made librdkafka's."""
    out = dict(conf)
    for key, use in JAVA_ONLY.items():
        if key in out:
            raise ConfigError(f"kafka.{key}", redacted(key, out[key]),
                              "is a Java client setting librdkafka does not have", f"use {use}")
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        mechanism = out.get("sasl.mechanism", out.get("sasl.mechanisms"))
        for key, value in _jaas(jaas, mechanism).items():
            out.setdefault(key, value)
    keystore_type = out.pop("ssl.keystore.type", None)
    if keystore_type is not None and keystore_type.upper() != "PKCS12":
        raise ConfigError("kafka.ssl.keystore.type", keystore_type,
                          "is not PKCS12, the only keystore librdkafka reads",
                          "convert it: keytool -importkeystore -deststoretype PKCS12")
    if out.get("ssl.endpoint.identification.algorithm") == "":  # Java's "no verification"
        out["ssl.endpoint.identification.algorithm"] = "none"
    return out


def check_with_librdkafka(conf: Mapping[str, str]) -> None:
    """Build (and close) a consumer with ``conf`` and no brokers: librdkafka checks every key
    and value, and files it must read (keystores, CA files), without any network."""
    settings = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    try:
        Consumer(with_logger({"group.id": "kafka-lake-compactor-check", **settings})).close()
    except KafkaException as exc:
        error = exc.args[0]
        text = error.str() if hasattr(error, "str") else str(error)
        named = re.search(r'property:?\s*"?([\w.]+)"?', text)
        key = named.group(1) if named and named.group(1) in settings else None
        if key is None and "SASL mechanism" in text:
            key = "sasl.mechanism"
            settings = {key: "GSSAPI (librdkafka's default)", **settings}
        reason = text.removeprefix("Failed to create consumer: ")
        raise ConfigError(f"kafka.{key}" if key else "kafka.*",
                          redacted(key, settings[key]) if key else "(see the rule)",
                          f"librdkafka refuses it: {reason}",
                          "see librdkafka's CONFIGURATION.md for the keys it knows") from None
