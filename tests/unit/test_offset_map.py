import numpy as np

from compactor.offset_map import BYTES_PER_ENTRY, OffsetMap, digests


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
    arrays = m._keys.nbytes + m._offsets.nbytes  # the map's own memory
    assert arrays == 1000 * BYTES_PER_ENTRY
