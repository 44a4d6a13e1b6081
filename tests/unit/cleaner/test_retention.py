from compactor.cleaner.retention import expired_segments
from compactor.config import TopicConfig
from tests.unit.cleaner.test_cleanable import NOW, plog, seg


def topic(policy: str, **kw) -> TopicConfig:
    return TopicConfig(name="t", cleanup_policy=frozenset(policy.split(",")),
                       segment_ms=10**9, **kw)


def test_compact_alone_never_drops_segments() -> None:
    log = plog(seg(0, 9, 100, NOW - 10**8), seg(10, 19, 100, NOW))
    assert expired_segments(log, topic("compact", retention_ms=1), NOW) == []


def test_time_retention_drops_the_oldest_segments_past_retention_ms() -> None:
    log = plog(seg(0, 9, 100, NOW - 5_000), seg(10, 19, 100, NOW - 4_000),
               seg(20, 29, 100, NOW - 100), seg(30, 39, 100, NOW - 9_000))
    doomed = expired_segments(log, topic("compact,delete", retention_ms=3_000), NOW)
    # Oldest first, stopping at the first young one.
    assert [s.base_offset for s in doomed] == [0, 10]


def test_retention_removes_the_segment_being_appended_to_as_kafka_does() -> None:
    """Kafka rolls the active segment and deletes it when it is past retention."""
    log = plog(seg(0, 9, 100, NOW - 5_000), seg(10, 19, 100, NOW - 4_000))
    doomed = expired_segments(log, topic("delete", retention_ms=3_000), NOW)
    assert [s.base_offset for s in doomed] == [0, 10]
    log = plog(seg(0, 9, 100, NOW))  # by size too, the log's only segment
    assert [s.base_offset for s in expired_segments(
        log, topic("delete", retention_bytes=0), NOW)] == [0]


def test_size_retention_keeps_the_log_within_retention_bytes() -> None:
    log = plog(seg(0, 9, 100, NOW), seg(10, 19, 100, NOW), seg(20, 29, 100, NOW),
               seg(30, 39, 100, NOW))
    doomed = expired_segments(log, topic("delete", retention_bytes=250), NOW)
    assert [s.base_offset for s in doomed] == [0]
