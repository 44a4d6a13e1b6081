import random

import numpy as np
import pyarrow as pa

from compactor.cleaner.offset_map import BYTES_PER_ENTRY, OffsetMap, digests


def test_last_offset_of_each_key_wins() -> None:
    m = OffsetMap(BYTES_PER_ENTRY * 10, load_factor=1.0)
    keys = [b"a", b"b", b"a", b"c", b"b"]
    assert m.put_batch(digests(keys), np.arange(5, dtype=np.int64)) == 5
    assert m.put_batch(digests([b"a"]), np.array([9], dtype=np.int64)) == 1
    assert m.lookup(digests([b"a", b"b", b"c", b"zz"])).tolist() == [9, 4, 3, -1]
    assert m.latest_offset == 9


def test_a_full_map_takes_the_prefix_whose_new_keys_fit() -> None:
    m = OffsetMap(BYTES_PER_ENTRY * 2, load_factor=1.0)
    keys = [b"a", b"b", b"a", b"c", b"a"]
    taken = m.put_batch(digests(keys), np.arange(5, dtype=np.int64))
    assert taken == 3 and len(m) == 2 and m.latest_offset == 2
    assert m.put_batch(digests([b"d"]), np.array([7], dtype=np.int64)) == 0
    assert m.put_batch(digests([b"b"]), np.array([7], dtype=np.int64)) == 1  # known key fits


def test_capacity_is_buffer_over_24_bytes_times_load_factor() -> None:
    assert OffsetMap(24_000, load_factor=0.9).capacity == 900
    m = OffsetMap(24 * 1000, 1.0)
    m.put_batch(digests([b"%d" % i for i in range(1000)]), np.arange(1000, dtype=np.int64))
    arrays = m._first.nbytes + m._second.nbytes + m._offsets.nbytes  # the map's own memory
    assert arrays == 1000 * BYTES_PER_ENTRY


def test_short_keys_are_exact_and_long_keys_hash() -> None:
    keys = [b"a", b"a\x00", b"", None, b"x" * 15, b"x" * 16, b"y" * 16, b"x" * 16, b"\x01"]
    d = [tuple(row) for row in digests(keys).tolist()]
    assert d[2] == d[3]  # null digests like the empty key
    assert d[5] == d[7]  # the same long key, the same digest
    distinct = [d[i] for i in (0, 1, 2, 4, 5, 6, 8)]
    assert len(set(distinct)) == len(distinct)  # trailing zero bytes, 0x01, lengths 15/16


def test_digests_of_an_arrow_slice_match_those_of_its_values() -> None:
    values = [b"k%d" % i for i in range(50)] + [b"long-key-%030d" % i for i in range(50)]
    array = pa.array(values, pa.binary()).slice(30, 40)
    assert (digests(array) == digests(values[30:70])).all()


def test_stored_keys_sharing_a_first_word_stay_apart() -> None:
    m = OffsetMap(BYTES_PER_ENTRY * 10, load_factor=1.0)
    keys = np.array([[5, 3], [5, 1], [7, 0], [5, 2]], dtype=np.uint64)
    assert m.put_batch(keys, np.arange(4, dtype=np.int64)) == 4
    assert m.put_batch(np.array([[5, 1]], dtype=np.uint64), np.array([9], dtype=np.int64)) == 1
    probe = np.array([[5, 1], [5, 2], [5, 3], [5, 4], [7, 0], [6, 0], [5, 0]], dtype=np.uint64)
    assert m.lookup(probe).tolist() == [9, 3, 0, -1, 2, -1, -1]


def test_the_map_agrees_with_a_dict_over_random_batches() -> None:
    rng = random.Random(11)
    pool = [b"%d" % i for i in range(300)] + [b"k" * 20 + b"%d" % i for i in range(300)]
    m = OffsetMap(BYTES_PER_ENTRY * 10_000, load_factor=1.0)
    expected: dict[bytes, int] = {}
    offset = 0
    for _ in range(30):
        batch = [rng.choice(pool) for _ in range(rng.randrange(1, 200))]
        offsets = np.arange(offset, offset + len(batch), dtype=np.int64)
        assert m.put_batch(digests(batch), offsets) == len(batch)
        for key, o in zip(batch, offsets.tolist(), strict=True):
            expected[key] = o
        offset += len(batch)
    assert m.lookup(digests(pool)).tolist() == [expected.get(k, -1) for k in pool]
    assert len(m) == len(expected)


def _random_log(seed: int, first: int, batches: int) -> tuple[list[bytes], np.ndarray]:
    """Keys and increasing offsets with gaps (a compacted log's offsets are not dense)."""
    rng = random.Random(seed)
    pool = [b"%d" % i for i in range(50)] + [b"long-key-" * 3 + b"%d" % i for i in range(50)]
    keys = [rng.choice(pool) for _ in range(batches * 40)]
    offsets = first + np.cumsum([rng.choice((1, 1, 1, 3)) for _ in keys]).astype(np.int64)
    return keys, offsets


def _superseded_by_dict(keys: list[bytes], offsets: np.ndarray,
                        query_keys: list[bytes], query_offsets: np.ndarray) -> list[bool]:
    last = dict(zip(keys, offsets.tolist(), strict=True))
    return [last.get(k, -1) > o for k, o in zip(query_keys, query_offsets.tolist(), strict=True)]


def test_superseded_records_of_the_dirty_range_come_from_the_bits() -> None:
    keys, offsets = _random_log(5, 1000, 10)
    m = OffsetMap(BYTES_PER_ENTRY * 1000, load_factor=1.0, first_offset=1000)
    for i in range(0, len(keys), 40):
        assert m.put_batch(digests(keys[i:i + 40]), offsets[i:i + 40]) == 40
    # records before the dirty range (cleaned segments) and after it are looked up
    below = [b"1", b"2", b"nope"]
    after = [b"1", b"nope"]
    query = below + keys + after
    at = np.concatenate([[10, 20, 30], offsets, [offsets[-1] + 5] * 2]).astype(np.int64)
    got = m.superseded(at, pa.array(query, pa.binary()))
    assert got.tolist() == _superseded_by_dict(keys, offsets, query, at)
    assert got[3:3 + len(keys)].sum() == len(keys) - len(set(keys))  # one survivor per key
    # one bit per offset of the range, grown by doubling
    assert m._bits.nbytes <= 2 * ((offsets[-1] - 1000) // 8 + 1)


def test_offsets_past_the_bits_budget_are_looked_up() -> None:
    keys, offsets = _random_log(6, 0, 10)
    buffer = BYTES_PER_ENTRY * 200  # bits for the first 4,800 offsets of ~500 records' range
    tracked = OffsetMap(buffer, 1.0, first_offset=0)
    tracked._tracked = 64  # a small budget: most of the range is answered by lookups
    plain = OffsetMap(buffer, 1.0)
    for m in (tracked, plain):
        m.put_batch(digests(keys), offsets)
    expected = _superseded_by_dict(keys, offsets, keys, offsets)
    assert tracked.superseded(offsets, pa.array(keys)).tolist() == expected
    assert plain.superseded(offsets, pa.array(keys)).tolist() == expected
    assert tracked._bits.nbytes == 8


def test_a_record_below_the_first_offset_is_refused() -> None:
    m = OffsetMap(BYTES_PER_ENTRY * 10, 1.0, first_offset=100)
    m.put_batch(digests([b"a"]), np.array([100], dtype=np.int64))
    try:
        m.put_batch(digests([b"a"]), np.array([50], dtype=np.int64))
    except ValueError as exc:
        assert "below the map's first offset 100" in str(exc)
    else:
        raise AssertionError("an offset below the dirty range was taken")
