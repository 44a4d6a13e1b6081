"""What an append to a small Delta table costs a process that appends for months.

The erasure ledger gains an append per micro-batch with tombstones and per done event. Three
ways to make one, each on its own new table (a checkpoint every 10 commits, as ours):

- ``kept open``: one delta-rs table object for the whole run, appended through.
- ``opened, appended through``: a fresh open, then the append through that object (what
  ``ErasureLedger.record_done`` does).
- ``opened, appended by path``: a fresh open, then ``write_deltalake(path, ...)``, which opens
  the table again inside (what ``record_done`` did before): the baseline.

``python bench/delta_appends.py`` prints each way's median ms per append by tenth of the run,
and the last tenth against the baseline's.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake


def run(way: str, appends: int) -> list[float]:
    path = tempfile.mkdtemp(prefix="delta-appends-")
    write_deltalake(path, pa.table({"a": [0]}), configuration={"delta.checkpointInterval": "10"})
    kept = DeltaTable(path)
    times = []
    for i in range(appends):
        rows = pa.table({"a": [i]})
        started = time.perf_counter()
        if way == "kept open":
            write_deltalake(kept, rows, mode="append")
        elif way == "opened, appended through":
            write_deltalake(DeltaTable(path), rows, mode="append")
        else:
            DeltaTable(path)
            write_deltalake(path, rows, mode="append")
        times.append((time.perf_counter() - started) * 1000)
    n = max(1, appends // 10)
    return [statistics.median(times[j:j + n]) for j in range(0, n * 10, n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--appends", type=int, default=300)
    args = parser.parse_args()
    ways = ("opened, appended by path", "opened, appended through", "kept open")
    tenths = {way: run(way, args.appends) for way in ways}
    base = tenths[ways[0]][-1]
    print(f"{args.appends} appends of one row each; median ms per append by tenth of the run, "
          "and the last tenth against the baseline's:")
    for way, figures in tenths.items():
        print(f"  {way:<26} " + " ".join(f"{f:5.1f}" for f in figures)
              + f"   {figures[-1] / base:.2f}x")


if __name__ == "__main__":
    main()
