"""The soak's preload mode: a micro-batch's fixed cost over a log of many small files (days
of history, built quickly) against the same over an empty log.

    python bench/soak.py --preload-files 100000
"""

from __future__ import annotations

import argparse
import logging
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from soak_producer import PARTITIONS, Producer, mirror_config
from soak_records import Batches, capture_steps, print_parts
from workloads import create_topic

from compactor.demo.broker import EmbeddedBroker
from compactor.demo.workload import Record, produce
from compactor.ingest.writer import RangeResult, commit_ranges
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.datafiles import write_data_file
from compactor.lake.layout import (
    LOG_PARTITION_COLUMNS,
    LOG_SCHEMA,
    ensure_table,
    topic_paths,
)
from compactor.positions import INGEST
from streaming.service import Service

# A data file's columns: the log's, less the partition columns (they are directories).
LOG_FILE_SCHEMA = pa.schema([f for f in KAFKA_SCHEMA if f.name != "partition"]
                            + [pa.field("deleteHorizonMs", pa.int64())])


def preload(lake: Path, bootstrap: str, topic: str, files: int) -> None:
    """``files`` one-record files, a second apart, in hourly segments of each partition, as a
    long history of micro-batches would leave them; the broker holds the same offsets."""
    config = mirror_config(bootstrap, lake.parent, [topic])
    per_partition = files // PARTITIONS
    produce(bootstrap, topic, [Record(b"p%d-k%d" % (p, o), b"v" * 100, p)
                               for p in range(PARTITIONS) for o in range(per_partition)])
    log_path = topic_paths(str(lake), topic).log
    ensure_table(log_path, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=config.storage)
    now_ms = int(time.time() * 1000)
    chunk = 5000
    for start in range(0, per_partition, chunk):
        results = []
        for p in range(PARTITIONS):
            written = []
            for o in range(start, min(per_partition, start + chunk)):
                row = pa.table({
                    "key": [b"p%d-k%d" % (p, o)], "value": [b"v" * 100], "topic": [topic],
                    "offset": [o], "timestamp": [(now_ms - (per_partition - o) * 1000) * 1000],
                    "timestampType": [0], "headers": [[]], "deleteHorizonMs": [None]},
                    schema=LOG_FILE_SCHEMA)
                segment = o - o % 3600
                written.append(write_data_file(
                    log_path, f"partition={p}/segment={segment}", row, 103, "log",
                    {"partition": str(p), "segment": str(segment)}, storage=config.storage))
            results.append(RangeResult(topic, p, min(per_partition, start + chunk) - 1,
                                       tuple(written)))
        commit_ranges(config, results)
        print(f"  preloaded {min(per_partition, start + chunk) * PARTITIONS:,} files", flush=True)
    _history_read(config, topic, per_partition)


def _history_read(config: Any, topic: str, per_partition: int) -> None:
    """What the readers of a long-running mirror left behind: a latest-value table holding
    every key, merged up to the log's end, and an erasure ledger scanned as far (the preload
    has no tombstones). Without them the first micro-batch would be a one-time catch-up over
    the whole history, not the steady cost this mode measures."""
    from deltalake import write_deltalake

    from compactor.erasure.ledger import LEDGER_PROPERTIES, LEDGER_SCHEMA
    from compactor.lake import operations
    from compactor.lake.layout import TABLE_PROPERTIES_LATEST
    from compactor.positions import LEDGER, TABLE

    paths = topic_paths(config.lake_path, topic)
    now_ms = int(time.time() * 1000)
    last = per_partition - 1
    n = PARTITIONS * per_partition
    rows = pa.table({
        "key": [b"p%d-k%d" % (p, o) for p in range(PARTITIONS) for o in range(per_partition)],
        "value": [b"v" * 100] * n, "topic": [topic] * n,
        "partition": [p for p in range(PARTITIONS) for _ in range(per_partition)],
        "offset": [o for _ in range(PARTITIONS) for o in range(per_partition)],
        "timestamp": [(now_ms - (per_partition - o) * 1000) * 1000
                      for _ in range(PARTITIONS) for o in range(per_partition)],
        "timestampType": [0] * n, "headers": [[]] * n},
        schema=KAFKA_SCHEMA)
    ensure_table(paths.table, KAFKA_SCHEMA, None, TABLE_PROPERTIES_LATEST,
                 storage=config.storage)
    write_deltalake(paths.table, rows, mode="append", commit_properties=operations.properties(
        operations.MERGE_LATEST, "preloaded history",
        [TABLE.moved_to(last, p) for p in range(PARTITIONS)]))
    ledger = ensure_table(f"{paths.root}/erasures", LEDGER_SCHEMA, None, LEDGER_PROPERTIES,
                          storage=config.storage)
    write_deltalake(ledger, LEDGER_SCHEMA.empty_table(), mode="append",
                    commit_properties=operations.properties(
                        operations.RECORD_ERASURES, "preloaded history",
                        [LEDGER.moved_to(last, p) for p in range(PARTITIONS)]))


def fixed_cost(args: argparse.Namespace, work: Path) -> None:
    from deltalake import DeltaTable

    figures = {}
    with EmbeddedBroker(work / "broker.log") as broker:
        for name, files in (("empty", 0), ("preloaded", args.preload_files)):
            topic = f"soak-{name}"
            create_topic(broker.bootstrap_servers, topic, PARTITIONS, cleanup_policy="delete")
            home = work / name
            if files:
                t0 = time.monotonic()
                preload(home / "lake", broker.bootstrap_servers, topic, files)
                log_path = topic_paths(str(home / "lake"), topic).log
                print(f"  {files:,} files in {time.monotonic() - t0:.0f}s; ingest position of "
                      f"partition 0: {INGEST.read(DeltaTable(log_path), 0)}")
            producer = Producer(broker.bootstrap_servers, [topic], args.rate, args.keys)
            producer.start()
            service = Service(mirror_config(broker.bootstrap_servers, home, [topic], **{
                "log.cleaner.enable": "false", "segment.ms": "3600000", **dict(args.set)}))
            thread = threading.Thread(target=service.run, daemon=True)
            thread.start()
            batches = Batches(home / "batches")
            handler = capture_steps(batches.mirror)
            end = time.monotonic() + args.fixed_seconds
            while time.monotonic() < end:
                time.sleep(2)
                batches.poll()
            producer.stop.set()
            producer.join(30)
            service.request_stop()
            thread.join(120)
            times, parts = batches.load()
            steady = [times[i] for i in sorted(times)[3:]]  # past the query's warm-up
            figures[name] = statistics.median(steady) if steady else float("nan")
            print(f"  {name}: {len(steady)} micro-batches, median {figures[name]:.2f}s; "
                  "its parts (medians, seconds):")
            print_parts(parts, [i for i in sorted(times)[3:] if i in parts])
            logging.getLogger("streaming.query").removeHandler(handler)
    print(f"\na micro-batch over {args.preload_files:,} files: {figures['preloaded']:.2f}s, over "
          f"an empty log: {figures['empty']:.2f}s, "
          f"{figures['preloaded'] / figures['empty']:.2f}x")
