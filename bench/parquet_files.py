"""What one small log file costs to write, the product's way and the cheapest ways there are.

A micro-batch over many partitions writes one data file per partition with records, and at a
few records a file the file's fixed cost is the batch's cost. Each round writes ``--files``
files of ``--records`` records each (the log's columns, 100-byte values) under folders
``partition=P/segment=0`` of a new directory, one way at a time:

- ``write_log_rows``: the product's path (``compactor.lake.log_files``): every file encoded in
  one pass by ``compactor.lake.parquet_encoder``, statistics, each file written under a
  temporary name and renamed to its final one.
- ``arrow_dataset``: the product's path before that encoder, still its path for large files:
  one Arrow dataset write of every file, each file renamed to its final name.
- ``write_data_file``: the product's path for one file: Parquet made in memory, one write
  and one rename.
- ``encoder_to_memory``: the encoder alone, every file into memory, nothing on disk.
- ``parquet_to_memory``: Arrow's Parquet writer alone, each file into memory, nothing on disk.
- ``row_groups``: one Parquet writer, one row group per would-be file (not a layout the log can
  have: a file holds one partition): what Parquet costs without a file's own set-up.
- ``arrow_ipc``: an Arrow IPC file per would-be file into memory (not Parquet).
- ``plain_files``: creating and writing a file of the same size with ``os`` calls: the file
  system's share.

The folders exist before a round is timed, as an active segment's folder does in a running
mirror. ``python bench/parquet_files.py`` prints the median microseconds per file of each way
over the rounds and its ratio to ``write_log_rows``. Prints figures and ratios, never asserts:
it is not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compactor.kafka.schema import KAFKA_SCHEMA  # noqa: E402
from compactor.lake.datafiles import (  # noqa: E402
    NON_PII_STATS,  # noqa: E402
    parquet_options,
    write_data_file,
)
from compactor.lake.log_files import LogGroup, write_log_rows  # noqa: E402
from compactor.lake.log_files import _write_together as arrow_dataset  # noqa: E402
from compactor.lake.parquet_encoder import encode_files  # noqa: E402
from compactor.lake.segments import record_sizes  # noqa: E402
from compactor.lake.storage import Storage  # noqa: E402


def log_rows(files: int, records: int) -> pa.Table:
    """``files * records`` rows of the log's data columns, offsets ascending."""
    rows = files * records
    stamps = pa.array(np.full(rows, 1_700_000_000_000_000, dtype=np.int64)).cast(
        KAFKA_SCHEMA.field("timestamp").type)
    table = pa.table({
        "key": pa.array([b"key-%d" % i for i in range(rows)], pa.binary()),
        "value": pa.array([b"v" * 100] * rows, pa.binary()),
        "topic": pa.array(["topic"] * rows, pa.string()),
        "offset": pa.array(np.arange(rows, dtype=np.int64)),
        "timestamp": stamps,
        "timestampType": pa.array(np.zeros(rows, dtype=np.int32)),
        "headers": pa.nulls(rows, KAFKA_SCHEMA.field("headers").type),
        "deleteHorizonMs": pa.nulls(rows, pa.int64()),
    })
    return table


def ways(table: pa.Table, files: int, records: int) -> dict[str, Callable[[str], None]]:
    """Each way, as a function writing the files under a new directory."""
    parts = [table.slice(i * records, records) for i in range(files)]
    sizes = [int(record_sizes(p).sum()) for p in parts]
    options = parquet_options(table.schema, sizes[0])
    storage = Storage()

    def product(root: str) -> None:
        write_log_rows([table], [LogGroup(root, i, 0, records, sizes[i]) for i in range(files)],
                       storage=storage)

    def dataset(root: str) -> None:
        arrow_dataset(table, [LogGroup(root, i, 0, records, sizes[i]) for i in range(files)])

    def encoder(_root: str) -> None:
        encode_files(table, list(range(0, files * records, records)), NON_PII_STATS)

    def one_by_one(root: str) -> None:
        for i, part in enumerate(parts):
            write_data_file(root, f"partition={i}/segment=0", part, sizes[i], "log",
                            {"partition": str(i), "segment": "0"}, storage=storage)

    def to_memory(_root: str) -> None:
        for part in parts:
            pq.write_table(part, pa.BufferOutputStream(), **options)

    def row_groups(_root: str) -> None:
        with pq.ParquetWriter(pa.BufferOutputStream(), table.schema, **options) as writer:
            for part in parts:
                writer.write_table(part)

    def ipc(_root: str) -> None:
        for part in parts:
            with pa.ipc.new_file(pa.BufferOutputStream(), table.schema) as writer:
                writer.write_table(part)

    def plain(root: str) -> None:
        data = b"x" * 2000
        for i in range(files):
            path = f"{root}/partition={i}/segment=0/f.parquet"
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, data)
            os.close(fd)

    return {"write_log_rows": product, "arrow_dataset": dataset, "write_data_file": one_by_one,
            "encoder_to_memory": encoder, "parquet_to_memory": to_memory,
            "row_groups": row_groups, "arrow_ipc": ipc, "plain_files": plain}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=200, help="files a round")
    ap.add_argument("--records", type=int, default=2, help="records a file")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    table = log_rows(args.files, args.records)
    candidates = ways(table, args.files, args.records)
    work = tempfile.mkdtemp(prefix="parquet-files-")
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for rnd in range(args.rounds + 1):  # the first round warms up
        for name, write in candidates.items():  # interleaved: drift hits every way alike
            root = f"{work}/{name}-{rnd}"
            for i in range(args.files):
                os.makedirs(f"{root}/partition={i}/segment=0")
            started = time.perf_counter()
            write(root)
            if rnd:
                times[name].append(time.perf_counter() - started)
    print(f"{args.files} files of {args.records} records, {args.rounds} rounds; "
          f"pyarrow {pa.__version__}; work dir {work}")
    base = statistics.median(times["write_log_rows"])
    print(f"{'way':<20} {'us a file':>10} {'ratio':>7}")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:<20} {median / args.files * 1e6:>10.0f} {median / base:>6.2f}x")


if __name__ == "__main__":
    main()
