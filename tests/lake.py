"""Writing and reading a lake without Kafka, through the product's own ingest code path."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from compactor.config import CompactorConfig, build_config, with_topic_configs
from compactor.ingest.appender import append_batches
from compactor.ingest.writer import RangeResult, commit_ranges, plan_ranges
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.layout import topic_paths


def offline_config(lake: str, topic: str, **topic_config: Any) -> CompactorConfig:
    raw = {"bootstrap.servers": "127.0.0.1:9", "topics": topic, "lake.path": lake}
    raw.update({k.replace("_", "."): str(v) for k, v in topic_config.items()})
    return with_topic_configs(build_config(raw), {})


def append(config: CompactorConfig, topic: str, partition: int,
           records: list[tuple[int, bytes | None, bytes | None, int]], now_ms: int,
           commit: bool = True) -> list[RangeResult]:
    """Append (offset, key, value, timestamp_ms) records as one micro-batch would; returns
    what its write tasks returned."""
    start, end = records[0][0], records[-1][0] + 1
    plans = plan_ranges(config, [(topic, partition, start, end)], now_ms)
    batch = pa.RecordBatch.from_pylist([
        {"key": k, "value": v, "topic": topic, "partition": partition, "offset": o,
         "timestamp": ts * 1000, "timestampType": 0, "headers": []}
        for o, k, v, ts in records
    ], schema=KAFKA_SCHEMA)
    results = [append_batches(plan, [batch]) for plan in plans]
    if commit:
        commit_ranges(config, results)
    return results


def log_rows(config: CompactorConfig, topic: str) -> list[tuple[Any, ...]]:
    table = DeltaTable(topic_paths(config.lake_path, topic).log).to_pyarrow_table(
        columns=["partition", "offset", "key", "value", "deleteHorizonMs", "segment"])
    return sorted(zip(*(table.column(c).to_pylist() for c in
                        ["partition", "offset", "key", "value", "deleteHorizonMs"]), strict=True))
