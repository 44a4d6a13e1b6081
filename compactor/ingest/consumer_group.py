"""The mirror's offsets, committed to a consumer group so that lag tools can see it.

``kafka-consumer-groups``, Burrow and lag dashboards read committed group offsets. After each
micro-batch's lake commit, the next offsets it mirrored are committed to ``group.id``, without
joining the group (an admin offset commit, as Spark's source joins none). For monitoring only:
the lake's app transactions stay the positions the mirror resumes from, so a failed or lost
group commit costs a stale dashboard, never data; it is logged and the mirror goes on.

Nothing here may hold the mirror up. A consumer's synchronous commit waits on the group
coordinator without a bound, and closing a consumer with a commit in flight waits for it too:
a broker that froze just after a lake commit held the run forever instead of letting the
source's own timeout end it with exit 3. So the commit goes through the AdminClient, whose
requests carry ``request_timeout``; outcomes are read at the next batch and at
:meth:`GroupCommitter.close`, which waits for them at most ``close_timeout_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import Future, wait

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from compactor.config import CompactorConfig
from compactor.ingest.batch_stats import BatchStats
from compactor.kafka.clients import with_logger

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0


class GroupCommitter:
    """Commits each micro-batch's next offsets to the configured group; a batch listener."""

    def __init__(self, config: CompactorConfig) -> None:
        self.group_id = config.group_id
        self._admin = AdminClient(with_logger(config.kafka_client_config()))
        self._in_flight: list[Future[object]] = []

    def on_batch(self, _batch_id: int, stats: Mapping[str, BatchStats]) -> None:
        offsets = [TopicPartition(topic, partition, offset)
                   for topic, s in sorted(stats.items())
                   for partition, offset in sorted(s.next_offsets.items())]
        self._reap(done_only=True)
        if not offsets:
            return
        futures = self._admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(self.group_id, offsets)],
            request_timeout=REQUEST_TIMEOUT_S)
        self._in_flight.extend(futures.values())

    def _reap(self, done_only: bool) -> None:
        for future in [f for f in self._in_flight if f.done() or not done_only]:
            self._in_flight.remove(future)
            if not future.done():
                continue
            try:
                result = future.result()
            except Exception as exc:  # KafkaException: the outcome of a monitoring write
                log.warning("could not commit the mirrored offsets to consumer group %s (lag "
                            "tools show the mirror behind; the lake is unaffected): %s",
                            self.group_id, exc)
                continue
            failed = [f"{tp.topic}-{tp.partition}: {tp.error}"
                      for tp in getattr(result, "topic_partitions", None) or [] if tp.error]
            if failed:
                log.warning("consumer group %s refused offsets of %s", self.group_id,
                            ", ".join(failed))

    @property
    def pending(self) -> int:
        return sum(not f.done() for f in self._in_flight)

    def close(self, close_timeout_s: float = 10.0) -> None:
        """Wait (bounded) for the commits in flight, so the last batch reaches the group."""
        wait(self._in_flight, timeout=close_timeout_s)
        if self.pending:
            log.warning("consumer group %s: %d offset commit(s) unanswered after %.0fs; lag "
                        "tools show the mirror behind until the next run commits",
                        self.group_id, self.pending, close_timeout_s)
        self._reap(done_only=True)
        self._in_flight.clear()
