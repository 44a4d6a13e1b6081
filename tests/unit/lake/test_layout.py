import json

import pyarrow as pa

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.datafiles import file_stats
from compactor.lake.layout import data_file_name, record_bytes_of, topic_paths
from compactor.lake.segments import record_sizes


def test_file_name_carries_record_bytes() -> None:
    name = data_file_name(5, 17, 4242)
    assert name.startswith("00000000000000000005-00000000000000000017.4242b.")
    assert record_bytes_of(f"partition=0/segment=5/{name}", size_bytes=1) == 4242
    assert record_bytes_of("partition=0/segment=5/part-0001.parquet", size_bytes=77) == 77


def test_topic_paths_follow_the_layout() -> None:
    p = topic_paths("s3://bucket/lake/", "orders")
    assert (p.log, p.table, p.rejected) == (
        "s3://bucket/lake/orders/log", "s3://bucket/lake/orders/table",
        "s3://bucket/lake/orders/rejected")


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([
        {"key": b"secret-key", "value": b"secret-value", "topic": "t", "partition": 0,
         "offset": 3, "timestamp": 1_700_000_000_000_000, "timestampType": 0,
         "headers": [{"key": "hk", "value": b"hv"}, {"key": "n", "value": None}]},
        {"key": b"k2", "value": None, "topic": "t", "partition": 0, "offset": 9,
         "timestamp": 1_700_000_000_005_000, "timestampType": 0, "headers": []},
    ], schema=KAFKA_SCHEMA)


def test_record_sizes_count_key_value_and_headers() -> None:
    assert record_sizes(_batch()).tolist() == [10 + 12 + 2 + 2 + 1, 2]


def test_stats_never_hold_key_or_value_bytes() -> None:
    table = pa.Table.from_batches([_batch()]).append_column(
        "deleteHorizonMs", pa.nulls(2, pa.int64()))
    stats = json.loads(file_stats(table))
    assert stats["numRecords"] == 2
    assert stats["minValues"] == {"offset": 3, "timestamp": "2023-11-14T22:13:20.000Z"}
    assert stats["maxValues"]["timestamp"] == "2023-11-14T22:13:20.005Z"
    for section in ("minValues", "maxValues", "nullCount"):
        assert set(stats[section]) <= {"offset", "timestamp", "deleteHorizonMs"}
    assert "secret" not in file_stats(table)
