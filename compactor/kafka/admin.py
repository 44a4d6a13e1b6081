"""What the mirror asks the Kafka cluster: topic existence and topic configs."""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource

from compactor.exceptions import BrokerUnavailableError, ConfigError
from compactor.kafka.clients import request_timeout_s, with_logger

# Start-up questions fail fast on a wrong address; kafka.socket.timeout.ms overrides.
_TIMEOUT_S = 15.0


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


def describe_topic_configs(
    client_config: Mapping[str, str], topics: tuple[str, ...]
) -> dict[str, dict[str, tuple[str | None, bool]]]:
    """Each topic's configs on the broker as (value, is_default); a missing topic is an error."""
    admin = admin_client(client_config)
    servers = client_config.get("bootstrap.servers", "?")
    timeout_s = request_timeout_s(client_config, _TIMEOUT_S)
    try:
        meta = admin.list_topics(timeout=timeout_s)
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

