"""Segment consolidation on real Delta tables written by the product's ingest code."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from compactor.cleaner.consolidation import ACTIVE_MERGE_FILES
from compactor.cleaner.maintenance import LogMaintenance, PassReport
from compactor.cleaner.partition_cleaner import clean_partition
from compactor.lake.layout import record_bytes_of, topic_paths
from compactor.ops.status import collect_status
from tests.lake import append, offline_config

T0 = 1_700_000_000_000


def _files_per_segment(config, topic: str) -> dict[int, int]:
    actions = DeltaTable(topic_paths(config.lake_path, topic).log).get_add_actions(flatten=True)
    segments = [int(s) for s in actions.column("partition.segment").to_pylist()]
    return {s: segments.count(s) for s in sorted(set(segments))}


def _segment_files(config, topic: str, segment: int) -> list[str]:
    actions = DeltaTable(topic_paths(config.lake_path, topic).log).get_add_actions(flatten=True)
    return [p for p, s in zip(actions.column("path").to_pylist(),
                              actions.column("partition.segment").to_pylist(), strict=True)
            if int(s) == segment]


def _rows(config, topic: str) -> list[dict]:
    table = DeltaTable(topic_paths(config.lake_path, topic).log).to_pyarrow_dataset().to_table()
    return sorted(table.to_pylist(), key=lambda r: (r["partition"], r["offset"]))


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_a_rolled_segment_becomes_one_file_with_every_record_unchanged(
        tmp_path: Path, policy: str) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy=policy, segment_ms=60_000,
                            retention_ms=-1, min_cleanable_dirty_ratio=0.99)
    # Five micro-batches into segment 0, distinct keys (nothing to compact), headers on.
    for b in range(5):
        append(config, "t", 0, [(10 * b + i, b"k%d" % (10 * b + i), b"v", T0 + 100 * b + i)
                                for i in range(10)], now_ms=T0 + 1000)
    append(config, "t", 0, [(50, b"late", b"v", T0 + 120_000)], now_ms=T0 + 120_000)  # rolls
    assert _files_per_segment(config, "t") == {0: 5, 50: 1}
    before = _rows(config, "t")
    record_bytes = sum(record_bytes_of(p, 0) for p in _segment_files(config, "t", 0))

    report = LogMaintenance(None, config).run_pass(now_ms=T0 + 121_000)
    [outcome] = report.cleaned
    assert outcome.result is not None and outcome.result.stats.files_merged == 5
    assert _files_per_segment(config, "t") == {0: 1, 50: 1}
    [merged] = _segment_files(config, "t", 0)
    assert record_bytes_of(merged, 0) == record_bytes  # the name counts every record's bytes
    log_dir = Path(topic_paths(config.lake_path, "t").log)
    assert pq.ParquetFile(log_dir / merged).num_row_groups == 1  # not one per replaced file
    assert _rows(config, "t") == before  # offsets, timestamps, headers, values: the same

    log = Path(topic_paths(config.lake_path, "t").log) / "_delta_log"
    commits = [[json.loads(line) for line in f.read_text().splitlines()]
               for f in sorted(log.glob("*.json"))]
    [last] = [c for c in commits if any(a.get("commitInfo", {}).get("compactor.operation")
                                        == "REWRITE SEGMENTS" for a in c)]
    changes = [a.get("add", a.get("remove"))["dataChange"] for a in last
               if "add" in a or "remove" in a]
    assert len(changes) == 6 and not any(changes)  # a rewrite that changes no data
    [status] = collect_status(config, ask_broker=False)[0]
    assert status.partitions[0].data_files == 2
    assert status.partitions[0].most_files_in_a_closed_segment == 1

    again = LogMaintenance(None, config).run_pass(now_ms=T0 + 122_000)
    assert again.cleaned == []  # nothing left to consolidate


def test_the_active_segment_is_consolidated_once_it_holds_many_small_files(
        tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "t", cleanup_policy="delete", segment_ms=3_600_000)
    for b in range(ACTIVE_MERGE_FILES):
        append(config, "t", 0, [(b, b"k%d" % b, b"v", T0 + b)], now_ms=T0 + 1000)
    before = _rows(config, "t")
    LogMaintenance(None, config).run_pass(now_ms=T0 + 2000)
    assert _files_per_segment(config, "t") == {0: 1}
    assert _rows(config, "t") == before
    append(config, "t", 0, [(ACTIVE_MERGE_FILES, b"next", b"v", T0 + 50)], now_ms=T0 + 3000)
    assert _files_per_segment(config, "t") == {0: 2}  # ingest goes on appending beside it


def test_a_merged_active_file_is_not_rewritten_for_a_few_small_new_ones(
        tmp_path: Path) -> None:
    """The active segment's first merged file stays while newer files hold far fewer bytes:
    rewriting it for every ACTIVE_MERGE_FILES new files would make the bytes written grow
    with the segment's history."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="delete", segment_ms=3_600_000)
    n = ACTIVE_MERGE_FILES
    for b in range(n):
        append(config, "t", 0, [(b, b"k%d" % b, b"v" * 1000, T0 + b)], now_ms=T0 + 1000)
    maintenance = LogMaintenance(None, config)
    maintenance.run_pass(now_ms=T0 + 2000)
    [first] = _segment_files(config, "t", 0)
    for b in range(n, 2 * n):
        append(config, "t", 0, [(b, b"k%d" % b, b"v", T0 + b)], now_ms=T0 + 3000)
    before = _rows(config, "t")
    [outcome] = maintenance.run_pass(now_ms=T0 + 4000).cleaned
    assert outcome.result is not None and outcome.result.stats.files_merged == n
    files = _segment_files(config, "t", 0)
    assert len(files) == 2 and first in files
    assert _rows(config, "t") == before


def test_a_stale_plan_never_removes_a_file_twice(tmp_path: Path) -> None:
    """A plan whose files another commit already rewrote is refused by the fence: a segment
    rewrite moves no checkpoint, and a second rewrite of the same files would duplicate them."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="delete", segment_ms=60_000)
    for b in range(3):
        append(config, "t", 0, [(b, b"k%d" % b, b"v", T0 + b)], now_ms=T0 + 1000)
    append(config, "t", 0, [(3, b"late", b"v", T0 + 120_000)], now_ms=T0 + 120_000)
    maintenance = LogMaintenance(None, config)
    assert maintenance.run_pass(now_ms=T0 + 121_000).cleaned  # the cleaner checkpoint is set
    for b in range(4, 7):  # segment 3 gets more files, then rolls
        append(config, "t", 0, [(b, b"k%d" % b, b"v", T0 + 120_000 + b)], now_ms=T0 + 130_000)
    append(config, "t", 0, [(7, b"later", b"v", T0 + 300_000)], now_ms=T0 + 300_000)
    [planned] = maintenance._plans(["t"], False, T0 + 301_000, PassReport())
    before = _rows(config, "t")
    assert maintenance._commit(planned, clean_partition(planned.plan), {})  # the first lands
    # The same plan again (as a second cleaner that planned from the same snapshot would
    # commit after the first): its checkpoint still matches, only the fence has moved.
    assert not maintenance._commit(planned, clean_partition(planned.plan), {})
    assert _rows(config, "t") == before
    assert _files_per_segment(config, "t") == {0: 1, 3: 1, 7: 1}
