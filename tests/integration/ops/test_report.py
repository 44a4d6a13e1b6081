"""``compactor report`` draws a day of history: the minutes ``compactor run`` recorded in
``L/T/history`` and the erasures of the ledger, made here over a day of (simulated) time."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from compactor.cleaner.cleanable import CleanableRange
from compactor.cleaner.maintenance import PartitionOutcome, PassReport
from compactor.cleaner.partition_cleaner import CleanResult, CleanStats
from compactor.erasure.ledger import ErasureLedger
from compactor.ingest.batch_stats import BatchStats
from compactor.ops.history import History, read_history
from tests.integration.helpers import compactor, write_config
from tests.lake import append, offline_config

DAY_MS = 86_400_000


def _outcome(delay_ms: int, dropped: int) -> PartitionOutcome:
    rng = CleanableRange(0, 0, 0, 10, 0, 100, None, delay_ms, False, 0.5)
    return PartitionOutcome("t", 0, rng, CleanResult("t", 0, 10, stats=CleanStats(
        records_dropped=dropped)), committed=True)


def test_a_day_of_history_is_drawn_and_summed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    config = offline_config(str(tmp_path / "lake"), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    start_ms = (int(time.time() * 1000) - DAY_MS) // 60_000 * 60_000  # a minute's start
    clock = {"s": start_ms / 1000}
    history = History(config, clock=lambda: clock["s"])
    for batch, minute in enumerate(range(0, 1440, 6)):  # a batch every 6 minutes, a pass an hour
        clock["s"] = (start_ms + minute * 60_000) / 1000 + 1
        delay = 1500 if minute < 1200 else 9000  # the mirror fell behind in the last hours
        history.on_batch(batch, {"t": BatchStats(
            records=50, record_bytes=5000, rejected=1 if minute == 600 else 0, files=1,
            partitions=1, newest_ms=int(clock["s"] * 1000) - delay)})
        if minute % 60 == 0:
            history.on_pass(PassReport([_outcome(2000 if minute != 720 else 70_000, 7)]), {})
    history.flush()
    minutes = read_history(config, "t", start_ms)
    assert len(minutes) == 240 and sum(m.records for m in minutes) == 240 * 50

    # Erasures over the day: tombstones every two hours, each done 20 s later, one late.
    ledger = ErasureLedger(config)
    for i, hour in enumerate(range(0, 24, 2)):
        stamp = start_ms + hour * 3_600_000 + 1000
        append(config, "t", 0, [(i, b"k%d" % i, None, stamp)], now_ms=stamp)
        ledger.record_tombstones("t")
        done = stamp + (20_000 if hour != 10 else 90_000)
        for target in ledger.targets("t"):
            ledger.record_done("t", target, {0: i}, now_ms=done)

    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "127.0.0.1:9", "topics": "t", "lake.path": str(tmp_path / "lake"),
        "cleanup.policy": "compact", "max.compaction.lag.ms": "60000"})
    figures = compactor("report", "--config", str(conf), "--since", "2d", "--json")
    assert figures.returncode == 0, figures.stderr[-3000:]
    (summary,) = json.loads(figures.stdout)["topics"]
    assert summary["batches"] == 240 and summary["records"] == 240 * 50
    assert summary["rejected"] == 1 and summary["passes"] == 24
    assert summary["records_dropped"] == 24 * 7 and summary["max_compaction_delay_ms"] == 70_000
    assert summary["mirror_delay_ms"]["max"] == 9000 and summary["mirror_delay_ms"]["p50"] == 1500
    assert summary["erasures"] == 12 and summary["erasures_late"] == 1
    assert summary["erasure_ms"]["max"] == 90_000

    drawn = compactor("report", "--config", str(conf), "--since", "2d", "--out",
                      str(tmp_path / "out"))
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    png, page = tmp_path / "out" / "t-report.png", tmp_path / "out" / "t-report.html"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    text = page.read_text()
    assert "12: 0 pending, 1 past the deadline" in text and "12,000 records" in text
    assert f"{png}" in drawn.stdout


def test_since_names_its_rule(tmp_path: Path) -> None:
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "127.0.0.1:9", "topics": "t", "lake.path": str(tmp_path)})
    done = compactor("report", "--config", str(conf), "--since", "yesterday")
    assert done.returncode == 2
    assert "--since='yesterday': must be a positive whole number with a unit" in done.stderr


def test_the_history_keeps_its_retention_and_few_files(tmp_path: Path) -> None:
    """Minutes older than history.retention.ms go, and the appends are compacted, once the
    table holds PRUNE_AT_FILES files, whatever runs wrote them (no run prunes at start)."""
    from deltalake import DeltaTable

    from compactor.ops.history import PRUNE_AT_FILES, history_path

    config = offline_config(str(tmp_path / "lake"), "t", cleanup_policy="compact",
                            history_retention_ms=3_600_000)
    clock = {"s": time.time() - 7200}  # two hours ago: past the retention by the end
    history = History(config, clock=lambda: clock["s"])

    def one_batch() -> None:
        history.on_batch(0, {"t": BatchStats(records=1, record_bytes=10, rejected=0, files=1,
                                             partitions=1)})
        history.flush()

    one_batch()
    path = history_path(config, "t")
    clock["s"] = time.time()
    for _ in range(PRUNE_AT_FILES - 2):  # one short of the count: nothing is pruned yet
        one_batch()
    assert len(DeltaTable(path).file_uris()) == PRUNE_AT_FILES - 1
    old_ms = int(time.time() * 1000) - 3_600_000
    minutes = read_history(config, "t", 0)  # a row per append; a minute may have several
    assert sum(m.batches for m in minutes if m.minuteMs < old_ms) == 1
    one_batch()
    assert len(DeltaTable(path).file_uris()) == 1
    minutes = read_history(config, "t", 0)
    assert all(m.minuteMs >= old_ms for m in minutes)  # the old minute gone
    assert sum(m.batches for m in minutes) == PRUNE_AT_FILES - 1
