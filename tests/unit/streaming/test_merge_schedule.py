"""When ``compactor run`` merges a latest-value table: early in the gap between micro-batches,
never past ``table.merge.interval.ms``.

A real lake on disk written through the product's ingest path; the mirror's merge schedule is
driven as the service loop drives it (no Spark query: only the MERGE side is exercised).
"""

from __future__ import annotations

import time
from pathlib import Path

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from compactor.config import CompactorConfig, build_config, with_topic_configs
from compactor.lake.layout import topic_paths
from streaming.query import Mirror, early_merge_s
from tests.lake import append


def _config(lake: Path) -> CompactorConfig:
    return with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": "a,b", "lake.path": str(lake),
        "table.merge.interval.ms": "10000", "trigger.interval.ms": "2000"}), {})


def _rows(config: CompactorConfig, topic: str) -> int:
    path = topic_paths(config.lake_path, topic).table
    try:
        return int(DeltaTable(path).to_pyarrow_table().num_rows)
    except TableNotFoundError:  # not created yet: no MERGE ran
        return 0


def test_a_table_is_merged_early_between_batches_and_when_due_beside_one(tmp_path: Path) -> None:
    config = _config(tmp_path)
    now_ms = int(time.time() * 1000)
    for topic in ("a", "b"):
        append(config, topic, 0, [(o, b"k%d" % o, b"v", now_ms) for o in range(4)], now_ms)
    mirror = Mirror(None, config)  # type: ignore[arg-type]  # the query is never started
    assert early_merge_s(10.0, 2000) == 2.0 and early_merge_s(4.0, 2000) == 1.0

    def merged_ago(seconds: float) -> None:
        for topic in ("a", "b"):
            mirror._last_merge[topic] = time.monotonic() - seconds

    merged_ago(7.0)  # 3 s before due: outside the early window
    mirror.merge_tables()
    assert (_rows(config, "a"), _rows(config, "b")) == (0, 0)

    merged_ago(8.5)  # inside the window, but a micro-batch runs: its cores are left to it
    mirror.in_batch = True
    mirror.merge_tables()
    assert (_rows(config, "a"), _rows(config, "b")) == (0, 0)

    mirror.in_batch = False  # the gap after the batch
    mirror.merge_tables()
    assert (_rows(config, "a"), _rows(config, "b")) == (4, 4)

    for topic in ("a", "b"):
        append(config, topic, 0, [(o, b"k%d" % o, b"v", now_ms) for o in range(4, 6)], now_ms)
    merged_ago(10.5)  # due: merged beside a running batch too
    mirror.in_batch = True
    mirror.merge_tables()
    assert (_rows(config, "a"), _rows(config, "b")) == (6, 6)
