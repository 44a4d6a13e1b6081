"""Two threads of one mirror commit to the erasure ledger at once (the micro-batch's tombstone
scan and the start's reconcile, or a done event and a prune): neither may fail because the
other's commit tidied the ledger's transaction log meanwhile.

Found by the fault hunt as a soak: both commits' delta-rs post-commit hooks deleted the same
expired commit file, and the loser's append, already committed, raised "not found" and
stopped the mirror.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable

from compactor.cleaner.vacuum import Vacuum, ensure_properties
from compactor.erasure.ledger import ErasureLedger
from tests.lake import offline_config


def test_concurrent_ledger_commits_never_fail_on_each_others_log_cleanup(
        tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "users", cleanup_policy="compact")
    ledger = ErasureLedger(config)
    ledger.record_reconciled("users", b"salt", 0, 0, pa.array([b"k"], pa.binary()), 0)
    path = ledger.path("users")
    ensure_properties(DeltaTable(path), 1000)  # as the vacuum pass leaves a ledger
    # Every commit file expires at once, so every checkpoint's cleanup has files to delete.
    DeltaTable(path).alter.set_table_properties({
        "delta.logRetentionDuration": "interval 0 seconds", "delta.checkpointInterval": "2"})
    failures: list[BaseException] = []

    def append(partition: int) -> None:
        for i in range(60):
            try:
                ledger.record_reconciled("users", b"salt", partition, i,
                                         pa.array([b"k%d" % i], pa.binary()),
                                         int(time.time() * 1000))
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                failures.append(exc)

    threads = [threading.Thread(target=append, args=(p,)) for p in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    assert len(ledger.reconciled("users")) == 121
    # The maintenance pass removes the expired commit files instead, alone under the lock.
    log = Path(path) / "_delta_log"
    before = len(list(log.glob("*.json")))
    Vacuum(config.storage).expired_commits(path)
    assert len(list(log.glob("*.json"))) < before
    assert len(ledger.reconciled("users")) == 121
