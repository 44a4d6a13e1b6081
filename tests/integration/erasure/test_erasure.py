"""The GDPR scenario end to end: superseded and erased values are physically gone by the
deadline from every file under the lake, while live values remain."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from compactor.demo.workload import Record, produce
from streaming.service import Service
from tests.conftest import wait_until
from tests.integration.helpers import (
    created,
    find_markers,
    lake_offsets,
    running,
    write_config,
)

M = 10_000


@pytest.mark.slow
@pytest.mark.usefixtures("spark")
def test_superseded_and_erased_values_are_gone_from_every_file_by_the_deadline(
        broker, topic_factory, lake_config, tmp_path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact", "max.compaction.lag.ms": str(M),
                              "min.cleanable.dirty.ratio": "0.99"})
    run = uuid.uuid4().hex[:8]

    def marker(key: int, version: int) -> bytes:
        return b"MARK-%s-%d-%d" % (run.encode(), key, version)

    keys = range(12)
    first = [Record(b"user-%d" % k, b'{"email":"%s"}' % marker(k, 1), k % 2) for k in keys]
    second = [Record(b"user-%d" % k, b'{"email":"%s"}' % marker(k, 2), k % 2)
              for k in keys if k % 3]
    erase = [Record(b"user-%d" % k, None, k % 2) for k in keys if k % 4 == 0]
    # A downstream table under the lake: one row per user, keyed by the Kafka key as text.
    import pyarrow as pa
    from deltalake import write_deltalake

    marts = tmp_path / "lake" / "marts" / "profiles"
    write_deltalake(str(marts), pa.table({
        "user_id": [f"user-{k}" for k in keys],
        "email": [marker(k, 0) for k in keys]}), configuration={
        "delta.dataSkippingNumIndexedCols": "0",  # no statistics: e-mails stay out of its log
        "delta.deletedFileRetentionDuration": "interval 1 seconds"})
    # The table merges on a 2 s cadence here (not after every batch): the deadline holds too.
    config = lake_config(topic, trigger_interval_ms="500", log_cleaner_backoff_ms="1000", **{
        "table.merge.interval.ms": "2000",
        "downstream.profiles.path": str(marts), "downstream.profiles.topic": topic,
        "downstream.profiles.key.column": "user_id"})
    service = Service(config)
    with running(service) as failures:
        # Steady state first: the deadline is promised to a running mirror, not a cold start.
        produce(broker.bootstrap_servers, topic, [Record(b"warm-up", b"x", 0)])
        # The warm-up record mirrored, not merely the tables created (the run creates them at
        # start): before, a cold first micro-batch could take the whole window.
        log_dir = tmp_path / "lake" / topic / "log"
        wait_until(lambda: created(log_dir) and lake_offsets(str(log_dir)),
                   120, "the mirror to commit the warm-up record")
        produce(broker.bootstrap_servers, topic, first)
        produce(broker.bootstrap_servers, topic, second + erase)
        superseded_at = time.time() * 1000  # the superseding records' timestamps are <= this
        dead = [marker(k, 1) for k in keys if k % 3] + [
            marker(k, v) for k in keys if k % 4 == 0 for v in (0, 1, 2)]
        live = [marker(k, 2) for k in keys if k % 3 and k % 4] + [
            marker(k, 1) for k in keys if not k % 3 and k % 4]
        deadline = superseded_at + M + config.cleaner.backoff_ms
        while time.time() * 1000 < deadline:
            time.sleep(0.1)  # the promise is about this instant
        found = find_markers(config.lake_path, dead + live + [marker(k, 0) for k in keys])
    assert not failures, failures
    assert not {m: paths for m, paths in found.items() if m in dead and paths}, \
        "superseded or erased values outlived their deadline"
    for m in live:
        assert any("/log/" in p for p in found[m]) and any("/table/" in p for p in found[m]), \
            (m, found[m])
    kept_downstream = [marker(k, 0) for k in keys if k % 4]
    assert all(any("/marts/" in p for p in found[m]) for m in kept_downstream)

    from deltalake import DeltaTable

    from compactor.erasure.ledger import ErasureLedger

    ledger = ErasureLedger(service.config)
    events = DeltaTable(f"{config.lake_path}/{topic}/erasures").to_pyarrow_table().to_pylist()
    assert len([e for e in events if e["event"] == "tombstone"]) == len(erase)
    backlog = ledger.backlog(topic)
    assert (backlog.pending, backlog.missed_deadlines) == (0, 0), events

    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path})
    for key in (b"user-0", b"user-1", b"user-3"):  # erased, updated, never superseded
        audit = subprocess.run([sys.executable, "-m", "compactor.cli", "audit-erasure",
                                "--config", str(conf), "--topic", topic, "--key", key.decode(),
                                "--json"], capture_output=True, text=True, timeout=120)
        assert audit.returncode == 0, audit.stdout + audit.stderr[-2000:]
        assert json.loads(audit.stdout)["traces"] == []


def test_audit_reports_a_superseded_value_still_on_disk(broker, topic_factory, tmp_path) -> None:
    """Before cleaning, the audit finds the superseded value and says it is pending."""
    from compactor.config import build_config, resolve_config
    from compactor.erasure.audit import audit_key
    from tests.conftest import overrides_for
    from tests.lake import append

    topic = topic_factory(1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"})
    config = resolve_config(build_config({
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), **overrides_for(topic)}))
    now = int(time.time() * 1000)
    append(config, topic, 0, [(0, b"alice", b"old-address", now - 5000),
                              (1, b"alice", b"new-address", now)], now_ms=now)
    result = audit_key(config, topic, b"alice")
    assert [(t.partition, t.offset, t.table) for t in result.traces] == [(0, 0, "log")]
    assert result.traces[0].deadline_ms == now + 60_000
    assert not result.overdue(now) and result.overdue(now + 60_001)
    assert result.latest == {0: (1, now, False)}


def test_a_tombstone_without_a_timestamp_is_due_from_when_its_file_was_written(
        tmp_path) -> None:
    """Kafka's -1 timestamp: the audit dates the tombstone by its data file, as the product
    does everywhere, not 1970 (which made it overdue at once)."""
    from compactor.erasure.audit import audit_key
    from tests.lake import append, offline_config

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    now = int(time.time() * 1000)
    append(config, "t", 0, [(0, b"alice", b"address", now - 5000), (1, b"alice", None, -1)],
           now_ms=now)
    result = audit_key(config, "t", b"alice")
    [trace] = result.traces
    written = max(f.stat().st_mtime_ns // 1_000_000
                  for f in (tmp_path / "t" / "log").rglob("*.parquet"))
    assert trace.deadline_ms == written + 60_000
    assert result.status(now) == "pending" and result.latest[0][2]


def test_the_audit_checks_every_partition_for_a_key_that_moved(tmp_path) -> None:
    """Keys move partition when partitions are added; the erasure promise is per key, so a
    tombstone in one partition supersedes the key's older value in another."""
    from compactor.erasure.audit import audit_key
    from tests.lake import append, offline_config

    config = offline_config(str(tmp_path), "t", cleanup_policy="compact",
                            max_compaction_lag_ms=60_000)
    now = int(time.time() * 1000)
    append(config, "t", 1, [(0, b"alice", b"address", now - 5000)], now_ms=now)
    append(config, "t", 0, [(0, b"alice", None, now)], now_ms=now)
    result = audit_key(config, "t", b"alice")
    assert [(t.partition, t.offset, t.what, t.deadline_ms) for t in result.traces] == [
        (1, 0, "value superseded by partition 0 offset 0", now + 60_000)]
    assert result.status(now) == "pending" and result.status(now + 60_001) == "overdue"


def test_without_max_lag_the_audit_reports_pending_with_no_deadline(
        broker, topic_factory, tmp_path) -> None:
    """No max.compaction.lag.ms, no deadline: pending, exit 7, never overdue (was exit 1)."""
    from compactor.config import build_config, resolve_config
    from tests.conftest import overrides_for
    from tests.lake import append

    topic = topic_factory(1, {"cleanup.policy": "compact"})
    raw = {"bootstrap.servers": broker.bootstrap_servers, "topics": topic,
           "lake.path": str(tmp_path / "lake"), **overrides_for(topic)}
    now = int(time.time() * 1000)
    append(resolve_config(build_config(raw)), topic, 0,
           [(0, b"alice", b"old", now - 5000), (1, b"alice", b"new", now)], now_ms=now)
    conf = write_config(tmp_path / "c.properties", **raw)
    audit = subprocess.run([sys.executable, "-m", "compactor.cli", "audit-erasure",
                            "--config", str(conf), "--topic", topic, "--key", "alice", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert audit.returncode == 7, audit.stdout + audit.stderr[-2000:]
    report = json.loads(audit.stdout)
    assert report["status"] == "pending-no-deadline"
    assert [(t["offset"], t["deadline_ms"], t["overdue"]) for t in report["traces"]] == [
        (0, None, False)]
