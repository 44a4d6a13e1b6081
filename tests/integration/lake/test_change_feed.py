"""The latest-value table's change data feed (``table.change.data.feed``): Delta change rows
for every upsert and delete, read by delta-spark's ``readChangeFeed``, and its files gone a
vacuum grace after they were written, like every other copy of an erased value."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.cleaner.vacuum import Vacuum
from compactor.demo.workload import Record, produce
from compactor.erasure.audit import audit_key
from compactor.lake.latest_table import catch_up
from compactor.lake.layout import CHANGE_FEED, topic_paths
from tests.conftest import wait_until
from tests.integration.helpers import created, write_config
from tests.lake import append, offline_config
from tests.lakehouse.delta_spark import job_result, run_job, start_job

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
    # Vacuum as the running mirror does at each pass, until the grace has passed since the
    # writing of the file with bob's delete (an earlier file may pass it first).
    def vacuumed() -> bool:
        Vacuum(config.storage).change_data(table_path, GRACE_MS)
        return not bob_in_change_data()

    wait_until(vacuumed, 30, "bob's change data deleted once past the grace")
    leftovers = [f for f in Path(table_path).rglob("*") if f.is_file()
                 and b"bob@v1" in f.read_bytes() and "_delta_log" not in f.parts]
    assert [f for f in leftovers if "_change_data" in f.parts] == []

    # Switched off: the table says so at the next catch-up and writes no change files.
    catch_up(config.lake_path, "users", config.storage, change_feed=False)
    assert DeltaTable(table_path).metadata().configuration[CHANGE_FEED] == "false"
    append(config, "users", 0, [(4, b"alice", None, now)], now_ms=now)
    catch_up(config.lake_path, "users", config.storage, change_feed=False)
    assert not list(Path(table_path, "_change_data").glob("*.parquet"))


@pytest.mark.slow
def test_a_stream_of_the_change_feed_rebuilds_the_table_while_the_mirror_runs(
        broker, topic_factory, tmp_path: Path) -> None:
    """delta-spark follows L/T/table's change feed with Structured Streaming while the mirror
    ingests, merges, cleans and vacuums: it never fails, and replaying the feed gives the
    table's rows."""
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "ck"),
        "trigger.interval.ms": "500", "log.cleaner.backoff.ms": "500",
        "table.merge.interval.ms": "0", f"topic.{topic}.table.change.data.feed": "true",
        f"topic.{topic}.segment.bytes": "2000", f"topic.{topic}.min.cleanable.dirty.ratio":
        "0.05", f"topic.{topic}.vacuum.grace.ms": "30000", "spark.master": "local[1]",
        "spark.ui.enabled": "false"})
    produce(broker.bootstrap_servers, topic, [Record(b"k0", b"first", 0)])
    mirror = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                               str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    table = topic_paths(str(tmp_path / "lake"), topic).table
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    try:
        wait_until(lambda: created(table)
                   and DeltaTable(table).to_pyarrow_dataset().count_rows() == 1, 180,
                   "the table's first row")
        follower = start_job({"stream": table, "change_feed": True, "seconds": 600,
                              "until": 10**9, "ready": str(ready), "stop": str(stop)})
        wait_until(lambda: ready.exists() or follower.poll() is not None, 300,
                   "the stream's first micro-batch")
        for i in range(40):  # updates of 8 keys, a tombstone in ten, over 20 s
            produce(broker.bootstrap_servers, topic, [
                Record(b"k%d" % (j % 8), None if (i + j) % 10 == 0 else b"v%d-%d" % (i, j),
                       j % 2) for j in range(12)])
            time.sleep(0.5)
        produce(broker.bootstrap_servers, topic, [Record(b"end", b"end", 0)])
        wait_until(lambda: b"end" in DeltaTable(table).to_pyarrow_dataset().to_table(
            columns=["key"]).column("key").to_pylist(), 120, "the last record merged")
        stop.touch()
        result = job_result(follower)
    finally:
        mirror.terminate()
        _, stderr = mirror.communicate(timeout=120)
    assert mirror.returncode == 0, stderr[-3000:]
    assert result["error"] is None, result["error"]
    replayed: dict[str, str] = {}
    for _, kind, key, value in result["seen"]:  # in commit order
        if kind in ("insert", "update_postimage"):
            replayed[key] = value
        elif kind == "delete":
            replayed.pop(key, None)
    rows = DeltaTable(table).to_pyarrow_dataset().to_table(columns=["key", "value"])
    assert replayed == {k.decode(): v.decode() for k, v in zip(
        rows.column("key").to_pylist(), rows.column("value").to_pylist(), strict=True)}
    assert any(kind == "delete" for _, kind, _, _ in result["seen"])
