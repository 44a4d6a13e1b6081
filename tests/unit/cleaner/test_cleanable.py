"""Choosing cleaning work: Kafka's LogCleanerManager cases on logs built by hand."""

from compactor.cleaner.cleanable import cleanable_range, cleaning_order
from compactor.config import TopicConfig
from compactor.lake.segments import DataFile, PartitionLog, Segment

NOW = 1_000_000


def seg(base: int, last: int, nbytes: int, ts: int, horizon: int | None = None) -> Segment:
    f = DataFile(f"p0/s{base}", 0, base, base, last, last - base + 1, nbytes, nbytes, ts, ts,
                 horizon)
    return Segment(0, base, (f,))


def topic(**kw) -> TopicConfig:
    base = dict(name="t", cleanup_policy=frozenset({"compact"}), segment_ms=10**9,
                min_cleanable_dirty_ratio=0.5)
    base.update(kw)
    return TopicConfig(**base)


def plog(*segments: Segment, checkpoint: int | None = None) -> PartitionLog:
    return PartitionLog(0, segments, committed_offset=segments[-1].last_offset,
                        cleaner_offset=checkpoint)


def test_active_segment_is_never_cleanable() -> None:
    r = cleanable_range(plog(seg(0, 9, 100, NOW - 50), seg(10, 19, 100, NOW - 10)),
                        topic(), NOW)
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (0, 10)
    assert r.cleanable_bytes == 100 and r.clean_bytes == 0


def test_ratio_test_is_strict() -> None:
    log = plog(seg(0, 9, 100, NOW), seg(10, 19, 100, NOW), seg(20, 29, 5, NOW), checkpoint=10)
    at_threshold = cleanable_range(log, topic(min_cleanable_dirty_ratio=0.5), NOW)
    assert at_threshold.dirty_ratio == 0.5 and not at_threshold.eligible
    assert cleanable_range(log, topic(min_cleanable_dirty_ratio=0.49), NOW).eligible


def test_min_lag_blocks_cleaning_even_above_the_ratio() -> None:
    log = plog(seg(0, 9, 100, NOW - 10_000), seg(10, 19, 100, NOW - 100), seg(20, 29, 5, NOW))
    r = cleanable_range(log, topic(min_compaction_lag_ms=1_000), NOW)
    assert r.first_uncleanable_offset == 10  # the second segment holds a too young record
    blocked = cleanable_range(plog(seg(0, 9, 100, NOW - 100), seg(10, 19, 5, NOW)),
                              topic(min_compaction_lag_ms=1_000, min_cleanable_dirty_ratio=0.0),
                              NOW)
    assert blocked.cleanable_bytes == 0 and not blocked.eligible


def test_nothing_the_tombstone_readers_have_not_read_is_cleanable() -> None:
    log = plog(seg(0, 9, 100, NOW - 50), seg(10, 19, 100, NOW - 50), seg(20, 29, 100, NOW - 50),
               seg(30, 39, 5, NOW))
    assert cleanable_range(log, topic(), NOW).first_uncleanable_offset == 30  # no bound
    # Read through 14: the segment holding 15 and everything after it wait, whole segments.
    assert cleanable_range(log, topic(), NOW, read_upto=14).first_uncleanable_offset == 10
    assert cleanable_range(log, topic(), NOW, read_upto=19).first_uncleanable_offset == 20
    nothing = cleanable_range(log, topic(), NOW, read_upto=-1)
    assert nothing.first_uncleanable_offset == 0 and nothing.cleanable_bytes == 0
    assert not nothing.eligible
    # Read past the log's end: the usual bound (the active segment) applies.
    assert cleanable_range(log, topic(), NOW, read_upto=99).first_uncleanable_offset == 30


def test_max_lag_forces_cleaning_below_the_ratio() -> None:
    # A large clean head and a small dirty segment: the ratio is about 1%.
    log = plog(seg(0, 9, 1000, NOW - 9_000), seg(10, 19, 10, NOW - 5_000), seg(20, 29, 1, NOW),
               checkpoint=10)
    lazy = topic(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=20_000)
    assert not cleanable_range(log, lazy, NOW).eligible
    tc = topic(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=4_000, vacuum_grace=100)
    r = cleanable_range(log, tc, NOW)
    assert r.must_clean and r.eligible
    # Forced at the cleaning lag (max lag - grace - allowance), so vacuum meets the max lag.
    assert r.max_compaction_delay_ms == 5_000 - tc.cleaning_lag_ms


def test_max_lag_reaches_an_idle_partition_through_the_rolled_active_segment() -> None:
    # One segment only: the active one. Idle past its deadline (KIP-354 roll = max lag), it
    # counts as rolled, so its tombstone can be cleaned although nothing follows it.
    log = plog(seg(0, 9, 100, NOW - 3_000))
    tc = topic(min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=5_000, vacuum_grace=100)
    r = cleanable_range(log, tc, NOW)
    assert r.first_uncleanable_offset == 10 and r.must_clean
    fresh = cleanable_range(plog(seg(0, 9, 100, NOW - 100)), tc, NOW)
    assert fresh.first_uncleanable_offset == 0 and not fresh.eligible


def test_a_checkpoint_outside_the_log_resets_to_the_log_start() -> None:
    log = plog(seg(5, 9, 10, NOW), seg(10, 19, 10, NOW), checkpoint=2)
    assert cleanable_range(log, topic(), NOW).first_dirty_offset == 5
    log = plog(seg(5, 9, 10, NOW), seg(10, 19, 10, NOW), checkpoint=999)
    assert cleanable_range(log, topic(), NOW).first_dirty_offset == 5


def test_an_expired_tombstone_horizon_makes_a_clean_partition_due() -> None:
    log = plog(seg(0, 9, 100, NOW, horizon=NOW - 1), seg(10, 19, 5, NOW), checkpoint=10)
    r = cleanable_range(log, topic(), NOW)
    assert r.cleanable_bytes == 0 and r.tombstones_due and r.eligible


def test_overdue_partitions_come_first_then_the_dirtiest() -> None:
    def rng(p: int, ratio_bytes: int, overdue: bool):
        ts = NOW - 50_000 if overdue else NOW
        log = PartitionLog(p, (seg(0, 9, 100, NOW), seg(10, 19, ratio_bytes, ts),
                               seg(20, 29, 1, NOW)), 29, 10)
        return cleanable_range(log, topic(max_compaction_lag_ms=10_000,
                                          min_cleanable_dirty_ratio=0.1), NOW)

    order = cleaning_order([rng(1, 300, False), rng(2, 50, True), rng(3, 900, False)])
    assert [r.partition for r in order] == [2, 3, 1]


def test_why_says_what_makes_a_partition_due_or_not() -> None:
    """``clean --dry-run`` prints it under each partition: the rule that decided."""
    log = plog(seg(0, 9, 100, NOW), seg(10, 19, 100, NOW), seg(20, 29, 5, NOW), checkpoint=10)
    assert cleanable_range(log, topic(), NOW).why() == (
        "dirty ratio 0.50 <= min.cleanable.dirty.ratio 0.5, nothing overdue under "
        "max.compaction.lag.ms, no tombstone past its horizon")
    assert cleanable_range(log, topic(min_cleanable_dirty_ratio=0.4), NOW).why() == (
        "dirty ratio 0.50 > min.cleanable.dirty.ratio 0.4")
    only_active = plog(seg(0, 9, 100, NOW))
    assert cleanable_range(only_active, topic(), NOW).why().startswith(
        "no dirty records outside the active segment")
    late = cleanable_range(plog(seg(0, 9, 100, NOW - 5000), seg(10, 19, 100, NOW)),
                           topic(max_compaction_lag_ms=1000), NOW)
    assert late.why().startswith("overdue by ") and "max.compaction.lag.ms" in late.why()
    held = cleanable_range(plog(seg(0, 9, 100, NOW - 10), seg(10, 19, 100, NOW)),
                           topic(min_compaction_lag_ms=1000, min_cleanable_dirty_ratio=0.01),
                           NOW)
    assert "held by min.compaction.lag.ms=1000" in held.why()


def test_a_deadline_segment_is_cleanable_when_due_despite_the_min_lag() -> None:
    # M = 60 s: cleaning due 33 s after a record; with a 10 s min lag a segment rolls 23 s
    # after its first record, so its newest is 10 s old when the first's cleaning is due.
    tc = topic(max_compaction_lag_ms=60_000, min_compaction_lag_ms=10_000)
    assert tc.cleaning_lag_ms == 33_000 and tc.roll_ms == 23_000
    first = NOW - 33_001  # a tombstone, the segment's first record, 1 ms overdue
    spanning = DataFile("p0/s0", 0, 0, 0, 9, 10, 100, 100, first, first + tc.roll_ms, None)
    log = plog(Segment(0, 0, (spanning,)), seg(10, 19, 5, NOW))
    r = cleanable_range(log, tc, NOW)
    assert r.must_clean and r.first_uncleanable_offset == 10 and r.cleanable_bytes == 100
    assert not tc.deadline_best_effort
    # A min lag as long as the cleaning lag leaves no roll that makes it in time.
    late = topic(max_compaction_lag_ms=60_000, min_compaction_lag_ms=33_000)
    assert late.deadline_best_effort and late.roll_ms == 1
    assert "min.compaction.lag.ms=33000 is not shorter than the 33000 ms" in (
        late.deadline_warning or "")
