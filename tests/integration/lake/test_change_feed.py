"""The latest-value table's change data feed (``table.change.data.feed``): Delta change rows
for every upsert and delete, read by delta-spark's ``readChangeFeed``, and its files gone a
vacuum grace after they were written, like every other copy of an erased value."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cleaner.vacuum import Vacuum
from compactor.erasure.audit import audit_key
from compactor.lake.latest_table import catch_up
from compactor.lake.layout import CHANGE_FEED, topic_paths
from tests.conftest import wait_until
from tests.lake import append, offline_config
from tests.lakehouse.delta_spark import run_job

GRACE_MS = 1000


@pytest.mark.slow
def test_the_change_feed_shows_upserts_and_deletes_and_leaves_with_the_grace(
        tmp_path: Path) -> None:
    config = offline_config(str(tmp_path), "users", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000, vacuum_grace_ms=GRACE_MS,
                            table_change_data_feed="true")
    assert config.topic("users").table_change_data_feed
    table_path = topic_paths(config.lake_path, "users").table
    now = int(time.time() * 1000)

    def merge() -> None:
        catch_up(config.lake_path, "users", config.storage, change_feed=True)

    append(config, "users", 0, [(0, b"alice", b"alice@v1", now), (1, b"bob", b"bob@v1", now)],
           now_ms=now)
    merge()
    append(config, "users", 0, [(2, b"alice", b"alice@v2", now)], now_ms=now)
    merge()
    append(config, "users", 0, [(3, b"bob", None, now)], now_ms=now)  # bob erased
    merge()
    assert DeltaTable(table_path).metadata().configuration[CHANGE_FEED] == "true"

    feed = run_job({"changes": table_path})
    assert feed["error"] is None, feed["error"]
    changes = [(kind, k, v) for _, kind, k, v in feed["rows"]]
    assert ("insert", "alice", "alice@v1") in changes
    assert ("update_preimage", "alice", "alice@v1") in changes
    assert ("update_postimage", "alice", "alice@v2") in changes
    assert ("delete", "bob", "bob@v1") in changes

    def bob_in_change_data() -> list[str]:
        return [t.path for t in audit_key(config, "users", b"bob").traces
                if "_change_data" in t.path]

    assert bob_in_change_data(), "the audit searches the change data files"
    # Vacuum as the running mirror does, once the grace has passed since the files' writing.
    wait_until(lambda: Vacuum(config.storage).change_data(table_path, GRACE_MS)
               or not bob_in_change_data(), 30, "the change data files past the grace deleted")
    assert not bob_in_change_data()
    leftovers = [f for f in Path(table_path).rglob("*") if f.is_file()
                 and b"bob@v1" in f.read_bytes() and "_delta_log" not in f.parts]
    assert [f for f in leftovers if "_change_data" in f.parts] == []

    # Switched off: the table says so at the next catch-up and writes no change files.
    catch_up(config.lake_path, "users", config.storage, change_feed=False)
    assert DeltaTable(table_path).metadata().configuration[CHANGE_FEED] == "false"
    append(config, "users", 0, [(4, b"alice", None, now)], now_ms=now)
    catch_up(config.lake_path, "users", config.storage, change_feed=False)
    assert not list(Path(table_path, "_change_data").glob("*.parquet"))
