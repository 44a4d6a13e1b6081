"""What a thread of delta-rs's tokio blocking pool costs the process that keeps it.

delta-rs's Python binding runs every call on one tokio runtime with tokio's defaults: up to
512 blocking threads, each leaving after 10 s idle. A burst of concurrent calls starts
threads; under a steady load each is woken often enough never to be idle, so the pool keeps
its largest size. ``python bench/tokio_pool.py`` opens and reads small Delta tables in a
loop: from one Python thread (the baseline), then from ``--threads`` at once, then from one
again, then after the pool's idle time, and prints the pool's threads and the process's
anonymous resident memory after each phase, and the memory per thread the burst added.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import rss_mb, tokio_threads  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--tables", type=int, default=8)
    parser.add_argument("--calls", type=int, default=300, help="opens and reads per phase")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="tokio-pool-")
    paths = []
    for i in range(args.tables):  # 30 commits, 4 partitions: an open reads a log and files
        path = f"{root}/t{i}"
        for j in range(30):
            write_deltalake(path, pa.table({"k": list(range(j * 100, (j + 1) * 100)),
                                            "p": [j % 4] * 100}),
                            mode="append", partition_by=["p"])
        paths.append(path)

    def work(path: str, calls: int) -> None:
        for _ in range(calls):
            table = DeltaTable(path)
            table.file_uris()
            table.to_pyarrow_dataset().to_table()

    def phase(name: str, threads: int, calls: int) -> tuple[int, float]:
        workers = [threading.Thread(target=work, args=(paths[i % len(paths)], calls))
                   for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        time.sleep(1)
        figures = tokio_threads(), rss_mb("RssAnon")
        print(f"  {name:<44} tokio threads {figures[0]:4d}   anonymous {figures[1]:6.1f} MB",
              flush=True)
        return figures

    phase("warm-up, one thread", 1, args.calls // 3)
    base = phase("one thread (baseline)", 1, args.calls)
    phase(f"{args.threads} threads at once", args.threads, args.calls // 3)
    after = phase("one thread again", 1, args.calls)
    time.sleep(12)  # past tokio's 10 s keep-alive
    idle = phase("one thread after 12 s idle", 1, 1)
    added = after[0] - base[0]
    print(f"\nthe burst left {added} more threads and {after[1] - base[1]:+.1f} MB under one "
          f"thread's load ({(after[1] - base[1]) / max(added, 1):.2f} MB a thread); idle, "
          f"{idle[0]} threads and {idle[1] - base[1]:+.1f} MB against the baseline")


if __name__ == "__main__":
    main()
