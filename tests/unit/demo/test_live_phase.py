"""When the demo's live phase may stop: every tombstone read and recorded, every erasure done."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable

from compactor.demo.run import settled
from compactor.erasure.ledger import ErasureLedger
from compactor.positions import LEDGER
from tests.lake import append, offline_config

T0 = 1_700_000_000_000


def test_no_pending_erasure_is_not_enough_while_the_mirror_has_tombstones_to_read() -> None:
    """A mirror that lags behind the topic has not recorded the tombstones it has yet to
    read: the ledger shows none pending, and the lake still holds their users' values."""
    ends = {0: 100, 1: 80, 2: 0}  # partition 2 got nothing
    assert not settled({0: 99, 1: 50}, ends, pending=0)
    assert not settled({0: 99}, ends, pending=0)
    assert not settled({0: 99, 1: 79}, ends, pending=1)
    assert settled({0: 99, 1: 79}, ends, pending=0)
    assert settled({0: 120, 1: 79}, ends, pending=0)


def test_the_scan_reaches_the_logs_end_past_its_last_tombstone(tmp_path: Path) -> None:
    """The position the ledger commits moves only with tombstones to record; what a scan has
    covered (``read_upto``, the demo's measure) reaches the log's last committed offset."""
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    append(config, "t", 0, [(0, b"a", b"v", T0), (1, b"a", None, T0 + 1)], now_ms=T0)
    ledger = ErasureLedger(config)
    assert ledger.record_tombstones("t") == 1
    append(config, "t", 0, [(2, b"b", b"v", T0 + 2), (3, b"c", b"v", T0 + 3)], now_ms=T0)
    assert ledger.record_tombstones("t") == 0
    assert ledger.read_upto("t") == {0: 3}
    committed = LEDGER.read(DeltaTable(ledger.path("t")), 0)
    assert committed == 1  # a lagging measure: it would keep the demo waiting
    assert settled(ledger.read_upto("t"), {0: 4}, ledger.backlog("t").pending) is False
    ledger.record_done("t", "log", {0: 3})
    ledger.record_done("t", "table", {0: 3})
    assert ledger.backlog("t").pending == 0
    assert settled(ledger.read_upto("t"), {0: 4}, ledger.backlog("t").pending)
