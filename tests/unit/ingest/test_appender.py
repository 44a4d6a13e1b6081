"""Many small ranges appended at once write what each range appended alone would."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compactor.formats import TopicFormat
from compactor.ingest import appender
from compactor.ingest.appender import append_batches, append_ranges
from compactor.ingest.writer import PartitionPlan, RangeResult
from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.segments import ActiveSegment, record_sizes
from compactor.lake.storage import Storage

NOW = 1_700_000_000_000


def _plan(root: Path, topic: str, partition: int, start: int, end: int, **kw: Any
          ) -> PartitionPlan:
    values: dict[str, Any] = dict(
        topic=topic, partition=partition, start=start, end=end,
        log_path=str(root / topic / "log"), rejected_path=str(root / topic / "rejected"),
        committed_offset=None, rejected_offset=None, active=None, segment_bytes=1_000,
        roll_ms=60_000, compact=True, now_ms=NOW, storage=Storage({}), formats=TopicFormat())
    values.update(kw)
    return PartitionPlan(**values)


def _batch(topic: str, partition: int, offsets: range, rng: random.Random) -> pa.RecordBatch:
    rows = []
    for o in offsets:
        kind = rng.random()
        rows.append({
            "key": None if kind < 0.1 else b"k%d" % rng.randrange(5),
            "value": None if kind > 0.8 else b"v" * rng.randrange(1, 300),
            "topic": topic, "partition": partition, "offset": o,
            "timestamp": (NOW + o * 7_000) * 1000, "timestampType": 0,
            "headers": None if 0.4 < kind < 0.5 else [{"key": "h", "value": b"x"}]})
    return pa.RecordBatch.from_pylist(rows, schema=KAFKA_SCHEMA)


def _cases(root: Path) -> tuple[list[PartitionPlan], list[list[pa.RecordBatch]]]:
    """Ranges of two topics (one compacted): nothing committed, part of the range committed
    (a replay), rejections already reported, an active segment that rolls by time and by
    size, one that takes the whole range, and an empty range."""
    rng = random.Random(7)
    plans, batches = [], []
    for i in range(24):
        topic = "a" if i % 3 else "b"
        start, end = 10 * i, 10 * i + rng.randrange(1, 30)
        kw: dict[str, Any] = {"compact": topic == "a"}
        if i % 4 == 1:
            kw["committed_offset"] = start + (end - start) // 2
        if i % 5 == 2:
            kw["rejected_offset"] = end - 3
        if i % 6 == 3:
            kw["active"] = ActiveSegment(start - 5, NOW + start * 7_000 - 50_000, 700)
        elif i % 6 == 0:  # an active segment that holds the whole range
            kw.update(active=ActiveSegment(start - 2, NOW + start * 7_000 - 1_000, 10),
                      segment_bytes=100_000, roll_ms=10_000_000)
        plans.append(_plan(root, topic, i, start, end, **kw))
        batches.append([] if i == 11 else [_batch(topic, i, range(start, end), rng)])
    return plans, batches


def _name(path: str) -> str:
    """A data file's name without its random part."""
    return re.sub(r"\.[0-9a-f]{16}\.parquet$", ".parquet", path)


def _files(root: Path) -> dict[str, list[dict[str, Any]]]:
    return {_name(str(p.relative_to(root))): pq.read_table(p).to_pylist()
            for p in sorted(root.rglob("*.parquet"))}


def _described(results: list[RangeResult]) -> list[tuple[Any, ...]]:
    out = []
    for r in results:
        assert r.tombstones is not None
        out.append((r.topic, r.partition, r.last_offset,
                    sorted((f.table, _name(f.path), f.records, f.record_bytes, f.stats, f.newest_ms)
                           for f in r.files),
                    r.tombstones.after, r.tombstones.upto, r.tombstones.rows.to_pylist(),
                    r.rejections))
    return out


appender_taken = appender._Taken


def test_many_ranges_at_once_write_the_files_each_alone_would(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    alone_root, together_root = tmp_path / "alone", tmp_path / "together"
    plans, batches = _cases(alone_root)
    alone = [append_batches(p, b) for p, b in zip(plans, batches, strict=True)]
    plans, batches = _cases(together_root)
    taken: list[appender._Taken] = []
    monkeypatch.setattr(appender, "_Taken", lambda *a: taken.append(appender_taken(*a))
                        or taken[-1])
    together = append_ranges(plans, batches)
    assert len(taken) >= 3  # ranges written straight from the task's rows, beside the others
    assert _described(together) == _described(alone)
    assert _files(together_root) == _files(alone_root)
    described = _described(alone)
    assert any(r[7].counts for r in described)  # the cases hold rejections,
    assert any(r[6] for r in described)  # tombstones,
    assert any(len({f[1].split("/")[1] for f in r[3] if f[0] == "log"}) > 1
               for r in described)  # and a range that rolled


def test_a_batch_at_a_time_writes_the_files_of_one_batch(tmp_path: Path) -> None:
    rng = random.Random(3)
    whole = _batch("a", 0, range(0, 40), rng)
    one = append_batches(_plan(tmp_path / "one", "a", 0, 0, 40), [whole])
    split = append_batches(_plan(tmp_path / "split", "a", 0, 0, 40),
                           [whole.slice(0, 13), whole.slice(13, 20), whole.slice(33)])
    assert _described([split]) == _described([one])
    assert _files(tmp_path / "split") == _files(tmp_path / "one")


def test_a_task_sends_the_records_its_log_files_got_within_its_bounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plans, batches = _cases(tmp_path / "all")
    results = append_ranges(plans, batches)
    bundle = results[0].records
    assert bundle is not None and all(r.records is None for r in results[1:])
    for topic, partition, after, upto, rows in bundle.parts():  # exactly what the log holds
        files = tmp_path / "all" / topic / "log" / f"partition={partition}"
        if not files.exists():  # the empty range
            assert rows.num_rows == 0
            continue
        logged = pq.read_table(files)
        kept = sorted((o, k, v) for o, k, v in zip(*(logged.column(c).to_pylist()
                                               for c in ("offset", "key", "value")),
                                                    strict=True) if after < o <= upto)
        assert rows.select(["offset", "key", "value"]).to_pylist() == [
            {"offset": o, "key": k, "value": v} for o, k, v in kept]

    sizes = [(p.partition, sum(r.nbytes for r in b)) for p, b in zip(plans, batches,
                                                                      strict=True)]
    monkeypatch.setattr(appender, "RANGE_BYTES", sorted(n for _, n in sizes)[len(sizes) // 2])
    monkeypatch.setattr(appender, "TASK_BYTES", 3 * appender.RANGE_BYTES)
    plans, batches = _cases(tmp_path / "bounded")
    bundle = append_ranges(plans, batches)[0].records
    assert bundle is not None
    sent = sum(record_sizes(bundle.rows))
    assert 0 < sent <= appender.TASK_BYTES and len(bundle.ranges) < len(plans)
