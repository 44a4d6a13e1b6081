"""What the mirror asks the Kafka cluster: topic existence and topic configs."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource

from compactor.exceptions import BrokerUnavailableError, ConfigError
from compactor.kafka.clients import request_timeout_s, with_logger

# Start-up questions fail fast on a wrong address; kafka.socket.timeout.ms overrides.
_TIMEOUT_S = 15.0
# librdkafka's wait never returns to Python, where a stop signal is handled: wait in slices.
_SLICE_S = 0.5


# Keys librdkafka accepts for consumers but an AdminClient refuses or warns about.
_CONSUMER_ONLY = {
    "isolation.level", "group.id", "auto.offset.reset", "enable.auto.commit",
    "enable.partition.eof", "fetch.min.bytes", "fetch.wait.max.ms", "fetch.max.bytes",
    "max.partition.fetch.bytes", "queued.max.messages.kbytes", "queued.min.messages",
    "enable.auto.offset.store", "session.timeout.ms", "max.poll.interval.ms",
}


def admin_client(client_config: Mapping[str, str]) -> AdminClient:
    """An AdminClient from the mirror's client settings (consumer-only keys left out)."""
    return AdminClient(with_logger(
        {k: v for k, v in client_config.items() if k not in _CONSUMER_ONLY}))


def list_topics(admin: AdminClient, timeout_s: float) -> ClusterMetadata:
    """The cluster's metadata, asked for again every ``_SLICE_S`` until ``timeout_s`` passed,
    so that a Ctrl-C or SIGTERM meanwhile stops the command at once; librdkafka's
    KafkaException once the time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            return admin.list_topics(timeout=max(0.0, min(_SLICE_S, left)))
        except KafkaException:
            if left <= _SLICE_S:
                raise


def describe_topic_configs(
    client_config: Mapping[str, str], topics: tuple[str, ...]
) -> dict[str, dict[str, tuple[str | None, bool]]]:
    """Each topic's configs on the broker as (value, is_default); a missing topic is an error."""
    admin = admin_client(client_config)
    servers = client_config.get("bootstrap.servers", "?")
    timeout_s = request_timeout_s(client_config, _TIMEOUT_S)
    try:
        meta = list_topics(admin, timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"cannot reach Kafka at bootstrap.servers={servers}: {exc.args[0]} "
            "(is the cluster up, and are host and port right?)"
        ) from exc
    missing = [t for t in topics if t not in meta.topics or meta.topics[t].error is not None]
    if missing:
        raise ConfigError(
            "topics", ",".join(missing), f"do not exist on the cluster at {servers}",
            "create them first (the mirror never creates topics)",
        )
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    result: dict[str, dict[str, tuple[str | None, bool]]] = {}
    try:
        for resource, future in admin.describe_configs(resources).items():
            entries = future.result(timeout=timeout_s)
            result[resource.name] = {
                name: (entry.value, entry.is_default) for name, entry in entries.items()}
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"cannot describe topic configs at {servers}: {exc.args[0]}"
        ) from exc
    return result

