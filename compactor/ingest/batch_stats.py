"""What a micro-batch appended, per topic, and the running totals of a run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from compactor.lake.rejected import NULL_KEY, Rejections


@dataclass(frozen=True)
class BatchStats:
    """What one micro-batch appended to one topic."""

    records: int
    record_bytes: int
    rejected: int
    files: int
    partitions: int
    next_offsets: Mapping[int, int] = field(default_factory=dict)  # partition -> next offset
    rejections: Rejections = field(default_factory=lambda: Rejections({}, None))
    newest_ms: int | None = None  # the newest record timestamp appended

    @property
    def read(self) -> int:
        """Records read from Kafka: the log's, and those only ``rejected`` holds (null keys);
        an undecodable record is in both and counts once."""
        return self.records + self.rejections.counts.get(NULL_KEY, 0)


@dataclass
class IngestTotals:
    """Running totals of what the mirror appended."""

    batches: int = 0
    records: int = 0
    record_bytes: int = 0
    rejected: int = 0
    busy_seconds: float = 0.0  # time inside micro-batches: consume, write, commit, MERGE
    table_seconds: float = 0.0  # the part of it spent merging the latest-value tables
    per_topic: dict[str, int] = field(default_factory=dict)

    def add(self, stats: Mapping[str, BatchStats], seconds: float,
            table_seconds: float = 0.0) -> None:
        self.batches += 1
        self.busy_seconds += seconds
        self.table_seconds += table_seconds
        for topic, s in stats.items():
            self.records += s.records
            self.record_bytes += s.record_bytes
            self.rejected += s.rejected
            self.per_topic[topic] = self.per_topic.get(topic, 0) + s.records
