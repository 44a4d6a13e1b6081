"""Spark's Kafka source schema as Arrow types: the columns every table of the lake starts from."""

from __future__ import annotations

import pyarrow as pa

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

# Spark's Kafka source schema, column for column.
KAFKA_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", HEADERS_TYPE),
]
KAFKA_SCHEMA = pa.schema(KAFKA_FIELDS)
