"""When the demo's live phase may stop: every tombstone read and recorded, every erasure done."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from compactor.config import build_config
from compactor.demo.run import TOPIC, ledger_positions, settled
from compactor.erasure.ledger import ErasureLedger
from compactor.positions import LEDGER


def test_no_pending_erasure_is_not_enough_while_the_mirror_has_tombstones_to_read() -> None:
    """A mirror that lags behind the topic has not recorded the tombstones it has yet to
    read: the ledger shows none pending, and the lake still holds their users' values."""
    ends = {0: 100, 1: 80, 2: 0}  # partition 2 got nothing
    assert not settled({0: 99, 1: 50}, ends, pending=0)
    assert not settled({0: 99}, ends, pending=0)
    assert not settled({0: 99, 1: 79}, ends, pending=1)
    assert settled({0: 99, 1: 79}, ends, pending=0)
    assert settled({0: 120, 1: 79}, ends, pending=0)


def test_the_ledger_positions_are_read_from_its_table(tmp_path: Path) -> None:
    ledger = ErasureLedger(build_config({"bootstrap.servers": "127.0.0.1:9", "topics": TOPIC,
                                         "lake.path": str(tmp_path)}))
    assert ledger_positions(ledger) == {}  # no ledger table yet
    write_deltalake(ledger.path(TOPIC), pa.table({"x": [1]}), commit_properties=CommitProperties(
        app_transactions=[Transaction(LEDGER.id(0), 41), Transaction(LEDGER.id(2), 7)]))
    assert ledger_positions(ledger) == {0: 41, 2: 7}
