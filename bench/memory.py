"""W4: the cleaner's memory against the number of keys, under a fixed dedupe buffer.

``build_log`` writes a one-partition log of K keys, each written twice, through the product's
own ingest path (no broker: memory is the cleaner's concern). ``python bench/memory.py --lake
L --buffer B`` cleans it until idle in a fresh process, as a cleaning task would, and prints
JSON: the process's resident set size once its libraries are loaded and at its peak (the
task's memory is the difference), the passes and the map's use, and each step's own peak above
the memory held when it began (Linux: the peak is reset before each step through
/proc/self/clear_refs), so that a step that grows with the log shows by name.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from workloads import rss_mb

from compactor.config import CompactorConfig, build_config, with_topic_configs
from compactor.ingest.appender import append_batches
from compactor.ingest.writer import commit_ranges, plan_ranges
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.ops.arrow_pool import pick_arrow_pool

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


def _clean(lake: Path, buffer_bytes: int, *flags: str) -> dict[str, Any]:
    environ = dict(os.environ)
    pick_arrow_pool(environ)  # as a Spark worker's: Arrow's own pool too, before pyarrow loads
    out = subprocess.run([sys.executable, __file__, "--lake", str(lake),
                          "--buffer", str(buffer_bytes), *flags],
                         check=True, capture_output=True, text=True, env=environ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def measure(lake: Path, buffer_bytes: int) -> dict[str, Any]:
    """Clean ``lake`` in a fresh interpreter; its figures, with ``steps_mb`` from a second
    interpreter cleaning a copy with each step measured (resetting the peak would hide the
    whole task's, so the two are measured apart)."""
    copy = lake.with_name(lake.name + "-steps")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(lake, copy)
    result = _clean(lake, buffer_bytes)
    result["steps_mb"] = _clean(copy, buffer_bytes, "--steps")["steps_mb"]
    shutil.rmtree(copy, ignore_errors=True)
    return result


# The steps of a pass, by where they run: (module, attribute, name in the figures).
_STEPS = (
    ("compactor.cleaner.maintenance", "LogMaintenance._carry_tombstones", "tombstone readers"),
    ("compactor.cleaner.partition_cleaner", "_build_map", "offset map"),
    ("compactor.cleaner.partition_cleaner", "_rewrite_group", "rewrite"),
    ("compactor.cleaner.partition_cleaner", "_merge", "merge"),
    ("compactor.cleaner.maintenance", "LogMaintenance._commit", "commit"),
    ("compactor.cleaner.topic_vacuum", "TopicVacuum.run", "vacuum"),
)


def _instrument(peaks: dict[str, float]) -> None:
    """Wrap each step so that it records its peak resident memory above its start."""
    import functools
    import importlib

    clear = Path("/proc/self/clear_refs")
    for module_name, attribute, name in _STEPS:
        owner: Any = importlib.import_module(module_name)
        *path, leaf = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        step = getattr(owner, leaf)

        @functools.wraps(step)
        def measured(*args: Any, _step: Any = step, _name: str = name, **kwargs: Any) -> Any:
            clear.write_text("5")  # VmHWM := VmRSS
            start = rss_mb("VmRSS")
            try:
                return _step(*args, **kwargs)
            finally:
                peaks[_name] = max(peaks.get(_name, 0.0), rss_mb("VmHWM") - start)
                clear.write_text("5")

        setattr(owner, leaf, measured)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lake", type=Path, required=True,
                    help="the log to clean (with --keys: a directory to build logs in)")
    ap.add_argument("--buffer", type=int, default=16 << 20, help="dedupe buffer bytes")
    ap.add_argument("--keys", help="build a log of each of these key counts (comma-separated) "
                    "under --lake, measure each and print a line per log")
    ap.add_argument("--steps", action="store_true",
                    help="report each step's own peak (resets the process's peak as it goes)")
    args = ap.parse_args()
    if args.keys:
        for keys in (int(k) for k in args.keys.split(",")):
            lake = args.lake / f"w4-{keys}"
            shutil.rmtree(lake, ignore_errors=True)
            build_log(lake, keys)
            m = measure(lake, args.buffer)
            print(json.dumps({"keys": keys, "task_mb": round(m["rss_peak_mb"]
                                                             - m["rss_before_mb"]), **m}),
                  flush=True)
            shutil.rmtree(lake, ignore_errors=True)
        return
    import pandas  # noqa: F401  pyarrow imports it on first use; a Spark worker has it loaded

    from compactor.cleaner.maintenance import LogMaintenance
    from streaming.session import ARROW_POOL, DEFAULTS, use_arrow_pool

    # the allocator a Spark worker of the product has
    use_arrow_pool(DEFAULTS[ARROW_POOL], os.environ)
    config = _config(args.lake, args.buffer)
    steps: dict[str, float] = {}
    if args.steps:
        _instrument(steps)
    before = rss_mb("VmRSS")  # the interpreter with every library loaded, before the task
    started = time.perf_counter()
    reports = LogMaintenance(None, config).run_until_idle()
    seconds = time.perf_counter() - started
    peak = rss_mb("VmHWM")
    stats = [o.result.stats for r in reports for o in r.cleaned if o.result is not None]
    print(json.dumps({
        "rss_before_mb": before, "rss_peak_mb": peak, "seconds": seconds,
        "passes": len(stats), "map_capacity": stats[0].map_capacity if stats else 0,
        "max_map_entries": max((s.map_entries for s in stats), default=0),
        "records_dropped": sum(s.records_dropped for s in stats),
        **({"steps_mb": {k: round(v) for k, v in steps.items()}} if args.steps else {}),
    }))


if __name__ == "__main__":
    main()
