"""When ``compactor run`` merges a latest-value table: early in the gap between micro-batches,
never past ``table.merge.interval.ms``.

A real lake on disk written through the product's ingest path; the mirror's merge schedule is
driven as the service loop drives it (no Spark query: only the MERGE side is exercised).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from compactor.config import CompactorConfig, build_config, with_topic_configs
from compactor.lake.latest_table import LatestStats, catch_up
from compactor.lake.layout import topic_paths
from streaming import query
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


def test_an_idle_topic_is_not_caught_up_again_until_its_log_has_a_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path)
    now_ms = int(time.time() * 1000)
    for topic in ("a", "b"):
        append(config, topic, 0, [(o, b"k%d" % o, b"v", now_ms) for o in range(4)], now_ms)
    caught_up: list[str] = []

    def counted(lake_path: str, topic: str, *args: Any, **kwargs: Any) -> LatestStats:
        caught_up.append(topic)
        return catch_up(lake_path, topic, *args, **kwargs)

    monkeypatch.setattr(query, "catch_up", counted)
    mirror = Mirror(None, config)  # type: ignore[arg-type]  # the query is never started
    mirror.merge_tables(force=True)
    assert sorted(caught_up) == ["a", "b"] and (_rows(config, "a"), _rows(config, "b")) == (4, 4)

    caught_up.clear()  # nothing committed to either log since: both skipped
    mirror.merge_tables(force=True)
    assert caught_up == []

    append(config, "b", 0, [(4, b"k4", b"v", now_ms), (5, b"k0", None, now_ms)], now_ms)
    mirror.merge_tables(force=True)  # only the topic whose log moved, and all of its records
    assert caught_up == ["b"] and (_rows(config, "a"), _rows(config, "b")) == (4, 4)
    assert sorted(DeltaTable(topic_paths(config.lake_path, "b").table).to_pyarrow_table()
                  .column("key").to_pylist()) == [b"k1", b"k2", b"k3", b"k4"]
