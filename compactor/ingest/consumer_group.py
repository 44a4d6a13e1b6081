"""The mirror's offsets, committed to a consumer group so that lag tools can see it.

``kafka-consumer-groups``, Burrow and lag dashboards read committed group offsets. After each
micro-batch's lake commit, the next offsets it mirrored are committed to ``group.id``, without
joining the group (a simple commit, as Spark's source does none). For monitoring only: the
lake's app transactions stay the positions the mirror resumes from, so a failed or lost group
commit costs a stale dashboard, never data; it is logged and the mirror goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from compactor.config import CompactorConfig
from compactor.ingest.writer import BatchStats
from compactor.kafka.clients import with_logger

log = logging.getLogger(__name__)


class GroupCommitter:
    """Commits each micro-batch's next offsets to the configured group; a batch listener."""

    def __init__(self, config: CompactorConfig) -> None:
        self.group_id = config.group_id
        self._consumer = Consumer(with_logger({
            **config.kafka_client_config(), "group.id": config.group_id,
            "enable.auto.commit": False}))

    def on_batch(self, _batch_id: int, stats: Mapping[str, BatchStats]) -> None:
        offsets = [TopicPartition(topic, partition, offset)
                   for topic, s in sorted(stats.items())
                   for partition, offset in sorted(s.next_offsets.items())]
        if not offsets:
            return
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("could not commit the mirrored offsets to consumer group %s (lag tools "
                        "show the mirror behind; the lake is unaffected): %s", self.group_id, exc)
            return
        failed = [f"{tp.topic}-{tp.partition}: {tp.error}" for tp in result or [] if tp.error]
        if failed:
            log.warning("consumer group %s refused offsets of %s", self.group_id,
                        ", ".join(failed))

    def close(self) -> None:
        self._consumer.close()
