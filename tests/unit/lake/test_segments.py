from hypothesis import given
from hypothesis import strategies as st

from compactor.lake.segments import ActiveSegment, DataFile, PartitionLog, Segment, SegmentRoller


def test_rolls_before_the_record_that_would_pass_segment_bytes() -> None:
    roller = SegmentRoller(None, segment_bytes=100, roll_ms=10**9)
    assert roller.assign([0, 1, 2, 3], [0, 0, 0, 0], [40, 40, 40, 10]) == [0, 0, 2, 2]


def test_a_record_larger_than_segment_bytes_gets_a_segment_of_its_own() -> None:
    roller = SegmentRoller(None, segment_bytes=100, roll_ms=10**9)
    assert roller.assign([5, 6, 7], [0, 0, 0], [500, 500, 1]) == [5, 6, 7]


def test_rolls_when_timestamp_passes_roll_ms_after_the_first_record() -> None:
    roller = SegmentRoller(None, segment_bytes=10**9, roll_ms=1000)
    assert roller.assign([0, 1, 2, 3], [0, 1000, 1001, 1500], [1, 1, 1, 1]) == [0, 0, 2, 2]


def test_continues_the_active_segment_across_batches() -> None:
    roller = SegmentRoller(ActiveSegment(10, 5_000, 90), segment_bytes=100, roll_ms=1000)
    assert roller.assign([20, 21], [5_100, 5_200], [5, 10]) == [10, 21]
    assert roller.assign([22], [5_300], [1]) == [21]


def test_gaps_in_offsets_keep_base_offsets_exact() -> None:
    roller = SegmentRoller(None, segment_bytes=10, roll_ms=10**9)
    assert roller.assign([3, 9, 15], [0, 0, 0], [6, 6, 6]) == [3, 9, 15]


@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 5000)), min_size=1, max_size=200),
       st.integers(14, 300), st.integers(1, 3000))
def test_every_segment_obeys_the_rules(records, segment_bytes, roll_ms) -> None:
    sizes = [s for s, _ in records]
    stamps = [t for _, t in records]
    offsets = list(range(len(records)))
    bases = SegmentRoller(None, segment_bytes, roll_ms).assign(offsets, stamps, sizes)
    assert bases[0] == 0 and bases == sorted(bases)
    for base in set(bases):
        members = [i for i, b in enumerate(bases) if b == base]
        assert members[0] == base  # the base is the first record's offset
        total = sum(sizes[i] for i in members)
        assert total <= segment_bytes or len(members) == 1 or sizes[members[0]] > segment_bytes
        first = stamps[members[0]]
        assert all(stamps[i] - min(first, *(stamps[j] for j in members if j < i), first)
                   <= roll_ms for i in members)


def _segment(base: int, min_ts: int) -> Segment:
    f = DataFile(f"f{base}", 0, base, base, base + 9, 10, 100, 1000, min_ts, min_ts + 5, None)
    return Segment(0, base, (f,))


def test_idle_active_segment_past_its_deadline_is_not_continued() -> None:
    plog = PartitionLog(0, (_segment(0, 1_000), _segment(10, 2_000)), committed_offset=19)
    assert plog.writer_segment(roll_ms=500, now_ms=2_400) == ActiveSegment(10, 2_000, 100)
    assert plog.writer_segment(roll_ms=500, now_ms=2_501) is None
    assert PartitionLog(0, (), None).writer_segment(500, 0) is None


@given(
    records=st.lists(st.tuples(st.integers(0, 3), st.integers(-50, 400), st.integers(0, 120)),
                     min_size=1, max_size=80),
    cuts=st.lists(st.integers(1, 80), max_size=6),
    segment_bytes=st.integers(14, 400),
    roll_ms=st.integers(1, 1000),
)
def test_assign_batch_equals_assign_however_the_stream_is_cut(records, cuts, segment_bytes,
                                                              roll_ms) -> None:
    import numpy as np

    offsets, stamps, sizes, offset = [], [], [], 0
    for gap, ts, size in records:
        offset += gap + 1
        offsets.append(offset)
        stamps.append(1_000 + ts)
        sizes.append(size)
    expected = SegmentRoller(None, segment_bytes, roll_ms).assign(offsets, stamps, sizes)
    roller = SegmentRoller(None, segment_bytes, roll_ms)
    got: list[int] = []
    bounds = sorted({c for c in cuts if c < len(offsets)}) + [len(offsets)]
    start = 0
    for end in bounds:
        got += roller.assign_batch(np.array(offsets[start:end], dtype=np.int64),
                                   np.array(stamps[start:end], dtype=np.int64),
                                   np.array(sizes[start:end], dtype=np.int64)).tolist()
        start = end
    assert got == expected


@given(
    records=st.lists(st.tuples(st.integers(-300, 300), st.integers(0, 120)), min_size=1,
                     max_size=30),
    active=st.tuples(st.integers(-300, 300), st.integers(1, 400)),
    segment_bytes=st.integers(14, 1_000),
    roll_ms=st.integers(1, 600),
)
def test_take_counts_records_in_the_active_segment_only_when_none_would_roll(
        records, active, segment_bytes, roll_ms) -> None:
    stamps = [1_000 + ts for ts, _ in records]
    sizes = [size for _, size in records]
    offsets = list(range(100, 100 + len(records)))
    segment = ActiveSegment(50, 1_000 + active[0], active[1])
    exact = SegmentRoller(segment, segment_bytes, roll_ms)
    bases = exact.assign(offsets, stamps, sizes)
    taking = SegmentRoller(segment, segment_bytes, roll_ms)
    taken = taking.take(sum(sizes), min(stamps), max(stamps))
    fits = active[1] + sum(sizes) <= segment_bytes \
        and max(stamps) - min(segment.first_timestamp_ms, *stamps) <= roll_ms
    assert taken == (50 if fits else None)
    if taken is None:
        return
    assert bases == [50] * len(records)  # nothing rolled, as take said
    after = [offsets[-1] + 1], [max(stamps) + roll_ms // 2], [segment_bytes // 3]
    assert taking.assign(*after) == exact.assign(*after)  # and it counted them the same
