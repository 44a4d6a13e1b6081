"""The keys a compacted partition still holds a value for, read from the broker.

A compacted topic keeps the latest record of every key, so reading a partition from its log
start to a given end gives every key it has not erased: a key whose latest record there is a
value is live; one whose latest record is a tombstone, or that no record names, was erased (or,
on ``compact,delete``, expired). :mod:`compactor.erasure.reconcile` compares the lake with it.

Records are read as the mirror reads them (the configured ``isolation.level``, so aborted
transactions count for nothing) and only keys are kept, as one Arrow array: the memory is the
partition's live key bytes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from compactor.exceptions import BrokerUnavailableError
from compactor.kafka.clients import assigned_consumer, request_timeout_s

_BATCH = 10_000
_WAIT_S = 0.5


def live_keys(client_config: Mapping[str, str], topic: str, partition: int, start: int,
              end: int) -> pa.Array:
    """Keys whose latest record in offsets [``start``, ``end``) of the partition is a value.

    ``start`` is the partition's log start and ``end`` its end as the mirror's isolation level
    sees it, both listed just before; the read stops at the first record at or past ``end``.
    A broker that answers nothing for ``socket.timeout.ms`` (30 s by default) raises
    :class:`BrokerUnavailableError`.
    """
    latest: dict[bytes, bool] = {}
    if end <= start:
        return pa.array([], pa.binary())
    timeout_s = request_timeout_s(client_config, 30.0)
    # Starting at the log start listed just before: if retention moved it since, from there.
    consumer = assigned_consumer(client_config, **{"auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        position = start
        quiet_since = time.monotonic()
        while position < end:
            messages = consumer.consume(_BATCH, _WAIT_S)
            if not messages:
                if time.monotonic() - quiet_since > timeout_s:
                    raise BrokerUnavailableError(
                        f"reading the keys of {topic}-{partition}: nothing arrived for "
                        f"{timeout_s:.0f} s at offset {position} of {end}")
                continue
            quiet_since = time.monotonic()
            for m in messages:
                error = m.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:  # read all there was
                        position = end
                        break
                    raise BrokerUnavailableError(
                        f"reading the keys of {topic}-{partition}: {error.str()}")
                offset = m.offset()
                if offset is None or offset >= end:
                    position = end
                    break
                position = offset + 1
                key = m.key()
                if key is not None:
                    latest[bytes(key)] = m.value() is not None
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"reading the keys of {topic}-{partition}: {exc.args[0]}") from exc
    finally:
        consumer.close()
    return pa.array([k for k, live in latest.items() if live], pa.binary())
