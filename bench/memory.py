"""W4: the cleaner's memory against the number of keys, under a fixed dedupe buffer.

``build_log`` writes a one-partition log of K keys, each written twice, through the product's
own ingest path (no broker: memory is the cleaner's concern). ``python bench/memory.py --lake
L --buffer B`` cleans it until idle in a fresh process, as a cleaning task would, and prints
JSON: the process's resident set size once its libraries are loaded and at its peak (the
task's memory is the difference), the passes and the map's use.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa

from compactor.config import CompactorConfig, build_config, with_topic_configs
from compactor.ingest.writer import append_batches, commit_ranges, plan_ranges
from compactor.lake.layout import KAFKA_SCHEMA

TOPIC = "mem"


def _config(lake: Path, buffer_bytes: int) -> CompactorConfig:
    return with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": TOPIC, "lake.path": str(lake),
        "log.cleaner.dedupe.buffer.size": str(buffer_bytes), "segment.bytes": str(16 << 20),
        "segment.ms": "60000", "cleanup.policy": "compact",
    }), {})


def build_log(lake: Path, keys: int, chunk: int = 200_000) -> None:
    """Offsets 0..2K-1: every key once, then every key again (so K distinct dirty keys)."""
    config = _config(lake, 1 << 20)
    old_ms = int(time.time() * 1000) - 86_400_000  # every segment is closed and cleanable
    total = 2 * keys
    for start in range(0, total, chunk):
        end = min(total, start + chunk)
        ids = [o % keys for o in range(start, end)]
        batch = pa.RecordBatch.from_pydict({
            "key": [b"key-%09d" % k for k in ids],
            "value": [b"v%09d-" % o + b"x" * 80 for o in range(start, end)],
            "topic": [TOPIC] * (end - start), "partition": [0] * (end - start),
            "offset": list(range(start, end)),
            "timestamp": [old_ms * 1000 + o for o in range(start, end)],
            "timestampType": [0] * (end - start), "headers": [[]] * (end - start),
        }, schema=KAFKA_SCHEMA)
        plans = plan_ranges(config, [(TOPIC, 0, start, end)], old_ms)
        commit_ranges(config, [append_batches(plan, [batch]) for plan in plans])


def measure(lake: Path, buffer_bytes: int) -> dict[str, float]:
    """Clean ``lake`` in a fresh interpreter; its figures."""
    out = subprocess.run([sys.executable, __file__, "--lake", str(lake),
                          "--buffer", str(buffer_bytes)],
                         check=True, capture_output=True, text=True).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lake", type=Path, required=True)
    ap.add_argument("--buffer", type=int, required=True)
    args = ap.parse_args()
    import pandas  # noqa: F401  pyarrow imports it on first use; a Spark worker has it loaded

    from compactor.cleaner.maintenance import LogMaintenance

    config = _config(args.lake, args.buffer)
    before = _rss_mb("VmRSS")  # the interpreter with every library loaded, before the task
    started = time.perf_counter()
    reports = LogMaintenance(None, config).run_until_idle()
    seconds = time.perf_counter() - started
    stats = [o.result.stats for r in reports for o in r.cleaned if o.result is not None]
    print(json.dumps({
        "rss_before_mb": before, "rss_peak_mb": _rss_mb("VmHWM"), "seconds": seconds,
        "passes": len(stats), "map_capacity": stats[0].map_capacity if stats else 0,
        "max_map_entries": max((s.map_entries for s in stats), default=0),
        "records_dropped": sum(s.records_dropped for s in stats),
    }))


if __name__ == "__main__":
    main()
