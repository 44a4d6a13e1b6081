"""The naive baseline: the pattern users write today.

A Structured Streaming query reads the topic (the same Kafka source the mirror registers) and
``foreachBatch`` MERGEs every micro-batch into a latest-value Delta table through deltalake:
the batch is reduced to the last record of each key, a tombstone deletes, a value updates or
inserts. Every MERGE rewrites each table file holding a key the batch touches.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()),
                     ("partition", pa.int32()), ("offset", pa.int64())])


def _last_per_key(batch: pa.Table) -> pa.Table:
    """Rows of one Kafka partition arrive in offset order and a key stays in its partition,
    so the last row of a key is its latest record."""
    latest = {key: i for i, key in enumerate(batch.column("key").to_pylist())}
    return batch.take(sorted(latest.values()))


def run_naive(spark: Any, bootstrap: str, topic: str, work: Path,
              max_offsets_per_trigger: int) -> tuple[float, int]:
    """Mirror ``topic`` into ``work/table`` the naive way; returns (seconds, MERGEs)."""
    table_path = str(work / "table")
    write_deltalake(table_path, _SCHEMA.empty_table(), mode="overwrite")
    merges = 0

    def merge(df: Any, _batch_id: int) -> None:
        nonlocal merges
        rows = df.select("key", "value", "partition", "offset").toArrow()
        if rows.num_rows == 0:
            return
        source = _last_per_key(rows.cast(_SCHEMA))
        (DeltaTable(table_path)
         .merge(source, "t.key = s.key", source_alias="s", target_alias="t")
         .when_matched_delete("s.value IS NULL")
         .when_matched_update_all()
         .when_not_matched_insert_all("s.value IS NOT NULL")
         .execute())
        merges += 1

    query = (spark.readStream.format("pykafka")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic)
             .option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
             .load()
             .writeStream.foreachBatch(merge)
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True)
             .start())
    started = time.perf_counter()
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return time.perf_counter() - started, merges
