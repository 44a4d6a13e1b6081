"""What a table's checkpoint interval costs a long-running process in threads and time.

delta-rs reads every commit file since a table's last checkpoint at once, each read a task of
its tokio runtime's blocking pool, and tokio keeps a pool thread for as long as any work
reaches it within 10 s. A mirror touches a table every micro-batch, so the threads of the
largest burst stay for the life of the process, each with a stack and an allocator cache.

``python bench/checkpoint_threads.py`` appends (and MERGEs) ``--commits`` times to a new table,
once per checkpoint interval, each in a fresh process, and prints per interval: ms per
commit, the process's threads and resident memory at the end, and the ratios against
delta-rs's default of 100 measured in the same run. The product's tables use
``compactor.lake.layout.CHECKPOINT_INTERVAL``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import rss_mb  # noqa: E402

BASELINE = 100


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def one(interval: int, commits: int, operation: str) -> dict[str, float]:
    """Run in a fresh process: its threads are what this interval left."""
    from deltalake import DeltaTable, write_deltalake

    path = tempfile.mkdtemp(prefix="ckpt-threads-")
    rows = pa.table({"k": pa.array(range(100), pa.int64())})
    write_deltalake(path, rows, configuration={"delta.checkpointInterval": str(interval)})
    most = 0
    started = time.perf_counter()
    for _ in range(commits):
        if operation == "append":
            write_deltalake(path, rows, mode="append")
        else:
            (DeltaTable(path).merge(rows, predicate="t.k = s.k", source_alias="s",
                                    target_alias="t")
             .when_matched_update_all().when_not_matched_insert_all().execute())
        most = max(most, _threads())
    return {"ms per commit": (time.perf_counter() - started) / commits * 1000,
            "most threads": most, "threads at the end": _threads(), "RSS MB": rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--intervals", default="100,50,20,10,5")
    parser.add_argument("--one", nargs=2, metavar=("INTERVAL", "OPERATION"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.commits, args.one[1])))
        return
    intervals = sorted({BASELINE, *(int(i) for i in args.intervals.split(","))}, reverse=True)
    for operation in ("append", "merge"):
        results = {}
        for interval in intervals:
            out = subprocess.run(
                [sys.executable, __file__, "--commits", str(args.commits), "--one",
                 str(interval), operation], check=True, capture_output=True, text=True)
            results[interval] = json.loads(out.stdout.strip().splitlines()[-1])
        base = results[BASELINE]
        print(f"\n{operation}, {args.commits} commits to one table (ratios against interval "
              f"{BASELINE}, delta-rs's default):")
        print(f"  {'interval':>8} {'ms/commit':>10} {'most threads':>13} {'RSS MB':>8}")
        for interval, r in results.items():
            ms, threads = r["ms per commit"], r["most threads"]
            print(f"  {interval:>8} {ms:>6.1f} {ms / base['ms per commit']:>4.2f}x"
                  f" {threads:>6.0f} {threads / base['most threads']:>5.2f}x"
                  f" {r['RSS MB']:>8.0f}")


if __name__ == "__main__":
    main()
