"""What following a log costs a process that commits to it for an hour, at a commit a second.

The mirror commits each micro-batch to ``L/T/log`` through a :class:`LogFollower`, which writes
a checkpoint every 10 commits. Our tables keep commit files for the log retention (an hour at
the default ``vacuum.grace.ms``), so an hour of one-second triggers leaves ~3,600 of them.
``python bench/log_follower.py`` makes ``--commits`` one-file commits, each way in its own
interpreter, on a log made as the product makes it:

- the baseline: the follower as it was before 358b695, whose delta-rs table was opened once
  and advanced in place (``update_incremental``) at each checkpoint for the whole run;
- the product: the follower, whose delta-rs table is opened again at each checkpoint.

It prints, by tenth of the run, the median time of the commits that write a checkpoint and
of the others, and the interpreter's anonymous resident memory, and the last tenth of each
way against the first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import rss_mb  # noqa: E402

from compactor.lake import log_commit, operations  # noqa: E402
from compactor.lake.datafiles import write_data_file  # noqa: E402
from compactor.lake.layout import (  # noqa: E402
    CHECKPOINT_INTERVAL,
    KAFKA_SCHEMA,
    LOG_PARTITION_COLUMNS,
    LOG_SCHEMA,
    ensure_table,
)
from compactor.lake.log_follower import LogFollower  # noqa: E402
from compactor.lake.storage import LOCAL  # noqa: E402
from compactor.positions import INGEST  # noqa: E402

WAYS = ("advanced in place (before)", "opened at each checkpoint")
FILE_SCHEMA = pa.schema([*(f for f in KAFKA_SCHEMA if f.name != "partition"),
                         pa.field("deleteHorizonMs", pa.int64())])


class InPlace(LogFollower):
    """The baseline: the checkpoint step as it was, on the one table opened at the start."""

    def _checkpoint(self, version: int) -> None:
        assert self._base is not None
        self._base.update_incremental()
        self._base.create_checkpoint()
        self._base.cleanup_metadata()
        self._advance()


def one_way(way: str, commits: int) -> dict[str, list[float]]:
    root = tempfile.mkdtemp(prefix="log-follower-") + "/log"
    ensure_table(root, LOG_SCHEMA, LOG_PARTITION_COLUMNS, storage=LOCAL)
    follower = (InPlace if way == WAYS[0] else LogFollower)(root, LOCAL)
    others: list[tuple[int, float]] = []
    checkpoints: list[tuple[int, float]] = []
    memory: list[float] = []
    for offset in range(commits):
        rows = pa.table({
            "key": [b"k%d" % offset], "value": [b"v" * 100], "topic": ["t"],
            "offset": [offset], "timestamp": [int(time.time() * 1_000_000)],
            "timestampType": [0], "headers": [[]], "deleteHorizonMs": [None]},
            schema=FILE_SCHEMA)
        written = write_data_file(root, "partition=0/segment=0", rows, 103, "log",
                                  {"partition": "0", "segment": "0"}, storage=LOCAL)
        started = time.perf_counter()
        version = log_commit.append(
            follower, [written], [INGEST.moved_to(offset, 0)], operations.INGEST, "bench",
            lambda position: None, LOG_SCHEMA, LOG_PARTITION_COLUMNS, int(time.time() * 1000))
        elapsed = (time.perf_counter() - started) * 1000
        (checkpoints if version is not None and version % CHECKPOINT_INTERVAL == 0
         else others).append((offset, elapsed))
        memory.append(rss_mb("RssAnon"))
    n = max(1, commits // 10)

    def by_tenth(samples: list[tuple[int, float]]) -> list[float]:
        return [statistics.median([t for o, t in samples if i <= o < i + n] or [float("nan")])
                for i in range(0, 10 * n, n)]

    return {"others": by_tenth(others), "checkpoints": by_tenth(checkpoints),
            "anon": [statistics.mean(memory[i:i + n]) for i in range(0, 10 * n, n)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=3600)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # one way, in a child
    args = parser.parse_args()
    if args.way:
        print(json.dumps(one_way(args.way, args.commits)))
        return
    results = {way: json.loads(subprocess.run(
        [sys.executable, __file__, "--commits", str(args.commits), "--way", way],
        check=True, capture_output=True, text=True).stdout.splitlines()[-1]) for way in WAYS}
    print(f"{args.commits} one-file commits through the follower, a checkpoint every 10, no "
          "commit file old enough to expire; by tenth of the run:")
    for way, figures in results.items():
        print(f"  {way}")
        for key, label in (("others", "other commits, ms"),
                           ("checkpoints", "checkpoint commits, ms"),
                           ("anon", "anonymous memory, MB")):
            row = figures[key]
            print(f"    {label:<22}" + " ".join(f"{v:6.1f}" for v in row)
                  + f"   last/first {row[-1] / row[0]:.2f}x")
    before, after = (results[way] for way in WAYS)
    print("last tenth, product against the baseline: a checkpoint commit "
          f"{after['checkpoints'][-1] / before['checkpoints'][-1]:.2f}x, anonymous memory "
          f"{after['anon'][-1] / before['anon'][-1]:.2f}x")


if __name__ == "__main__":
    main()
