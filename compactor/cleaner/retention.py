"""Segment retention for ``cleanup.policy=delete`` and ``compact,delete`` (KIP-71).

As in Kafka (UnifiedLog's retention), whole segments are deleted from the oldest on, while the
oldest one is past ``retention.ms`` (its largest timestamp is older) or the log is larger than
``retention.bytes`` by at least that segment's size. The segment still being appended to is no
exception: Kafka rolls a new one and deletes it, and here the next append starts a new segment.
``compact`` alone deletes nothing.
"""

from __future__ import annotations

from compactor.config import TopicConfig
from compactor.lake.segments import PartitionLog, Segment


def expired_segments(plog: PartitionLog, tc: TopicConfig, now_ms: int) -> list[Segment]:
    """The oldest segments retention removes now, in offset order."""
    if not tc.delete:
        return []
    excess = (
        sum(s.record_bytes for s in plog.segments) - tc.retention_bytes
        if tc.retention_bytes >= 0 else -1
    )
    doomed: list[Segment] = []
    for seg in plog.segments:
        too_old = tc.retention_ms >= 0 and seg.max_timestamp_ms < now_ms - tc.retention_ms
        too_big = excess >= 0 and excess - seg.record_bytes >= 0
        if not (too_old or too_big):
            break
        doomed.append(seg)
        if excess >= 0:
            excess -= seg.record_bytes
    return doomed
