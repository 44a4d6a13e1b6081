"""The records a micro-batch committed, kept for the next MERGE of the latest-value table.

Real lakes on disk, written through the product's ingest path; a catch-up that uses the kept
records must leave the table exactly as one that reads the log's files.
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.latest_table import catch_up
from compactor.lake.layout import topic_paths
from compactor.lake.written_records import WrittenLog, WrittenRecords
from tests.lake import append, offline_config

NOW_MS = int(time.time() * 1000)


def _table(lake: Path) -> list[tuple[Any, ...]]:
    table = DeltaTable(topic_paths(str(lake), "t").table).to_pyarrow_table()
    return sorted(zip(*(table.column(c).to_pylist() for c in ["partition", "offset", "key",
                                                              "value"]), strict=True))


def _data_files(lake: Path) -> list[Path]:
    return [f for f in (lake / "t" / "log").rglob("*.parquet") if "_delta_log" not in f.parts]


def _rows(partition: int, offsets: range, topic: str = "t") -> WrittenRecords:
    rows = pa.Table.from_pylist(
        [{"key": b"k%d" % o, "value": b"v", "topic": topic, "partition": partition,
          "offset": o, "timestamp": NOW_MS * 1000, "timestampType": 0, "headers": []}
         for o in offsets], schema=KAFKA_SCHEMA)
    return WrittenRecords(rows, ((topic, partition, offsets.start - 1, offsets.stop - 1,
                                  len(offsets)),))


def test_a_merge_from_kept_records_reads_no_log_file_and_equals_one_from_the_files(
        tmp_path: Path) -> None:
    kept_lake, read_lake = tmp_path / "kept", tmp_path / "read"
    kept = WrittenLog()
    batches = [  # (partition, [(offset, key, value)]): updates, tombstones, a key in two
        (0, [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2")]),
        (1, [(0, b"c", b"1"), (1, b"b", b"9")]),
        (0, [(3, b"b", None), (4, b"d", b"1")]),
        (1, [(2, b"c", None), (3, b"e", b"1"), (4, b"e", b"2")]),
    ]
    for lake in (kept_lake, read_lake):
        config = offline_config(str(lake), "t", cleanup_policy="compact")
        for i, (partition, records) in enumerate(batches):
            results = append(config, "t", partition,
                             [(o, k, v, NOW_MS + i) for o, k, v in records], NOW_MS)
            if lake == kept_lake:
                kept.add(r.records for r in results if r.records is not None)
            if i == 1:  # a MERGE between batches, then the rest
                merged = catch_up(str(lake), "t", config.storage,
                                  written=kept if lake == kept_lake else None)
                if lake == kept_lake:
                    kept.merged("t", merged.merged_upto)
    for f in _data_files(kept_lake):  # reading a log file now fails the catch-up
        f.unlink()
    merged = catch_up(str(kept_lake), "t", config.storage, written=kept)
    kept.merged("t", merged.merged_upto)
    catch_up(str(read_lake), "t", config.storage)
    assert _table(kept_lake) == _table(read_lake) == [
        (0, 2, b"a", b"2"), (0, 4, b"d", b"1"), (1, 4, b"e", b"2")]
    assert kept.kept_bytes() == 0  # what the table merged is let go



def test_kept_records_are_used_only_for_a_whole_contiguous_range() -> None:
    kept = WrittenLog()
    kept.add([_rows(0, range(0, 3)), _rows(0, range(3, 5))])
    assert kept.records("t", 0, -1, 4).column("offset").to_pylist() == [0, 1, 2, 3, 4]
    assert kept.records("t", 0, 1, 4).column("offset").to_pylist() == [2, 3, 4]
    assert kept.records("t", 0, 2, 4).column("offset").to_pylist() == [3, 4]
    assert kept.records("t", 0, -1, 5) is None  # the log holds more than was kept
    assert kept.records("t", 1, -1, 4) is None

    kept.add([_rows(0, range(7, 9))])  # offsets 5-6 were committed but not kept
    assert kept.records("t", 0, 4, 8) is None and kept.records("t", 0, 6, 8) is not None
    kept.merged("t", {0: 8})
    assert kept.kept_bytes() == 0


def test_a_topic_past_the_cap_is_read_from_its_files_until_its_next_merge() -> None:
    small = _rows(0, range(0, 2))
    kept = WrittenLog(kept_bytes=small.rows.nbytes * 3)
    kept.add([small, _rows(0, range(2, 4)), _rows(0, range(0, 2), topic="u")])
    assert kept.records("t", 0, -1, 3) is not None
    kept.add([_rows(0, range(4, 6))])  # over the cap: the topic's records go
    assert kept.records("t", 0, -1, 5) is None and kept.records("u", 0, -1, 1) is not None
    kept.merged("t", {0: 5})
    kept.add([_rows(0, range(6, 8))])
    assert kept.records("t", 0, 5, 7).column("offset").to_pylist() == [6, 7]


def test_a_tasks_ranges_travel_as_one_table_and_are_kept_range_by_range() -> None:
    one, two = _rows(3, range(10, 13)), _rows(7, range(0, 1), topic="u")
    bundle = WrittenRecords(pa.concat_tables([one.rows, two.rows]),
                            (*one.ranges, *two.ranges))
    sent = pickle.loads(pickle.dumps(bundle))
    assert sent.rows.equals(bundle.rows) and sent.ranges == bundle.ranges
    kept = WrittenLog()
    kept.add([sent])
    assert kept.records("t", 3, 9, 12).column("offset").to_pylist() == [10, 11, 12]
    assert kept.records("u", 7, -1, 0).column("key").to_pylist() == [b"k0"]
