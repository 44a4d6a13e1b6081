"""The cleaner end to end: the broker, ``compactor run --once`` in-process, real Delta files."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.kafka.broker_offsets import OffsetReader
from compactor.lake.layout import topic_paths
from tests.conftest import wait_until
from tests.integration.helpers import created, log_table, run_once, write_config


def rows(config: Any, topic: str) -> list[dict[str, Any]]:
    return log_table(config, topic).to_pylist()


def wait_for_clock(ms: int) -> None:
    while time.time() * 1000 <= ms:
        time.sleep(0.05)  # the wall clock must pass a deadline computed from the data


@pytest.mark.usefixtures("spark")
def test_run_once_compacts_closed_segments_and_leaves_the_active_one(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact", "segment.bytes": "300",
                              "min.cleanable.dirty.ratio": "0.01"})
    records = [Record(b"k%d" % (i % 9), b"value-%04d" % i, i % 2) for i in range(240)]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic)

    summary = run_once(config)

    assert summary.ingest.records == 240 and summary.cleaning.partitions_cleaned == 2
    got = rows(config, topic)
    for partition in (0, 1):
        produced = [(o, r) for o, r in enumerate(r for r in records if r.partition == partition)]
        mine = [r for r in got if r["partition"] == partition]
        active = max(r["segment"] for r in mine)
        last_below: dict[bytes, int] = {}
        for offset, r in produced:
            if offset < active:
                last_below[r.key] = offset
        expected = sorted(set(last_below.values()) | {o for o, _ in produced if o >= active})
        assert [r["offset"] for r in mine] == expected
        for r in mine:  # offsets, keys and values are untouched
            assert (r["key"], r["value"]) == (produced[r["offset"]][1].key,
                                               produced[r["offset"]][1].value)
    again = run_once(config)
    assert again.cleaning.partitions_cleaned == 0  # nothing new is dirty


@pytest.mark.usefixtures("spark")
def test_a_tombstone_is_kept_until_its_horizon_and_then_removed(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "60",
                              "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "3000"})
    records = [Record(b"gone", b"secret-value", 0), Record(b"gone", None, 0),
               Record(b"never-seen", None, 0)]
    records += [Record(b"filler-%d" % i, b"x" * 20, 0) for i in range(6)]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic)

    cleaned_at = time.time() * 1000
    run_once(config)
    first = {r["offset"]: r for r in rows(config, topic)}
    assert 0 not in first  # the superseded value is gone from the log
    horizons = [first[1]["deleteHorizonMs"], first[2]["deleteHorizonMs"]]
    assert first[1]["value"] is None and first[2]["value"] is None
    assert all(cleaned_at + 3000 <= h <= time.time() * 1000 + 3000 for h in horizons)

    wait_for_clock(max(horizons))
    run_once(config)  # no new data: the expired horizon alone makes the partition due
    offsets = [r["offset"] for r in rows(config, topic)]
    assert 1 not in offsets and 2 not in offsets
    assert offsets == [3, 4, 5, 6, 7, 8]


@pytest.mark.usefixtures("spark")
def test_max_lag_forces_cleaning_of_an_idle_partition_below_the_ratio(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.99",
                              "max.compaction.lag.ms": "3500"})
    # The lag is the deadline for physical erasure: with a 100 ms vacuum grace and the 3 s
    # pass allowance, cleaning is forced 400 ms after a record's timestamp.
    # Timestamps 10 s ahead: the first run surely ends before the 2.5 s lag has passed.
    ts = int(time.time() * 1000) + 10_000
    produce(broker.bootstrap_servers, topic, [
        Record(b"user-1", b"v1", 0, ts), Record(b"user-1", b"v2", 0, ts),
        Record(b"user-1", None, 0, ts)])
    config = lake_config(topic, vacuum_grace_ms="100")
    run_once(config)
    first = rows(config, topic)
    assert [r["offset"] for r in first] == [0, 1, 2]  # young: nothing is due yet
    deadline = ts + 2500
    wait_for_clock(deadline)
    summary = run_once(config)  # nothing new arrived: the idle active segment has rolled
    assert summary.cleaning.partitions_cleaned == 1
    last = rows(config, topic)
    assert [r["offset"] for r in last] == [2]
    assert last[0]["value"] is None and last[0]["deleteHorizonMs"] is not None


@pytest.mark.usefixtures("spark")
def test_compact_delete_retention_drops_whole_old_segments(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact,delete", "segment.bytes": "100",
                              "retention.ms": "60000", "min.cleanable.dirty.ratio": "0.99"})
    now = int(time.time() * 1000)
    # 35 record bytes each: two records per 100-byte segment, the old ones filling 4 segments.
    old = [Record(b"old-%d" % i, b"y" * 30, 0, now - 3_600_000 + i) for i in range(8)]
    new = [Record(b"new-%d" % i, b"y" * 30, 0, now + i) for i in range(9)]
    produce(broker.bootstrap_servers, topic, old + new)
    config = lake_config(topic)
    run_once(config)
    got = rows(config, topic)
    assert [r["key"] for r in got] == [r.key for r in new]
    assert min(r["segment"] for r in got) == 8  # the log now starts at the first new segment


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("policy", ["compact,delete", "delete"])
def test_retention_reaches_the_latest_value_table(
        broker, topic_factory, lake_config, policy) -> None:
    """The table holds what a consumer of the log would reduce it to: keys whose records
    retention removed are gone from it too, a key updated since keeps its new value."""
    topic = topic_factory(1, {"cleanup.policy": policy, "segment.bytes": "100",
                              "retention.ms": "86400000", "min.cleanable.dirty.ratio": "0.99"})
    now = int(time.time() * 1000)
    old = [Record(b"old-%d" % i, b"y" * 30, 0, 978_307_200_000 + i) for i in range(8)]  # 2001
    new = [Record(b"old-0", b"n" * 30, 0, now)] + [
        Record(b"new-%d" % i, b"n" * 30, 0, now + i) for i in range(1, 9)]
    produce(broker.bootstrap_servers, topic, old + new)
    config = lake_config(topic)
    run_once(config)
    in_log = {r["key"]: r["value"] for r in rows(config, topic)}
    assert set(in_log) == {r.key for r in new}
    table = DeltaTable(topic_paths(config.lake_path, topic).table).to_pyarrow_table()
    assert dict(zip(table.column("key").to_pylist(), table.column("value").to_pylist(),
                    strict=True)) == in_log


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("policy", ["compact,delete", "delete"])
def test_retention_reaches_the_dead_letters(broker, topic_factory, lake_config, policy) -> None:
    """A dead letter is a copy of a log record: once retention removed the record from the
    log, its row in L/T/rejected goes too; the rows of records still in the log stay."""
    topic = topic_factory(1, {"cleanup.policy": policy, "segment.bytes": "100",
                              "retention.ms": "86400000", "min.cleanable.dirty.ratio": "0.99"})
    now = int(time.time() * 1000)
    old = [Record(b"old-%d" % i, b"not json %d" % i, 0, 978_307_200_000 + i)  # 2001
           for i in range(8)]
    new = [Record(b"new-%d" % i, b'{"n": %d}' % i, 0, now + i) for i in range(8)] + [
        Record(b"new-bad", b"still not json", 0, now + 8)]
    produce(broker.bootstrap_servers, topic, old + new)
    config = lake_config(topic, value_format="json", value_schema="n INT")
    run_once(config)
    assert {r["key"] for r in rows(config, topic)} == {r.key for r in new}
    rejected = DeltaTable(topic_paths(config.lake_path, topic).rejected).to_pyarrow_table()
    assert rejected.column("key").to_pylist() == [b"new-bad"]
    assert rejected.column("offset").to_pylist() == [16]


@pytest.mark.usefixtures("spark")
def test_time_retention_removes_the_last_segment_too_as_kafka_does(
        kafka, broker, topic_factory, lake_config) -> None:
    """Five records two minutes old under a one-minute retention.ms: Kafka rolls the segment
    they are in and deletes it; the mirror's next pass removes them too."""
    old = int(time.time() * 1000) - 120_000
    records = [Record(b"k%d" % i, b"v", 0, old + i) for i in range(5)]
    on_kafka = f"retained-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    admin.create_topics([NewTopic(on_kafka, 1, 1, config={
        "cleanup.policy": "delete", "retention.ms": "60000"})])[on_kafka].result(30)
    produce(kafka.bootstrap_servers, on_kafka, records)
    reader = OffsetReader({"bootstrap.servers": kafka.bootstrap_servers})
    wait_until(lambda: reader.offsets([(on_kafka, 0)], "earliest")[(on_kafka, 0)] == 5, 30,
               "Kafka's retention to delete the segment being appended to")

    topic = topic_factory(1, {"cleanup.policy": "delete", "retention.ms": "60000"})
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic)
    run_once(config)
    assert rows(config, topic) == []
    produce(broker.bootstrap_servers, topic, [Record(b"new", b"v", 0)])
    run_once(config)
    assert [(r["offset"], r["segment"]) for r in rows(config, topic)] == [(5, 5)]


@pytest.mark.usefixtures("spark")
def test_a_disabled_cleaner_stops_compaction_not_retention(
        broker, topic_factory, lake_config) -> None:
    """log.cleaner.enable=false, as in Kafka: no compaction, but retention still deletes."""
    compact = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "100",
                                "min.cleanable.dirty.ratio": "0.01"})
    delete = topic_factory(1, {"cleanup.policy": "delete", "retention.ms": "60000",
                               "segment.bytes": "100"})
    now = int(time.time() * 1000)
    produce(broker.bootstrap_servers, compact, [Record(b"same", b"v" * 30, 0) for _ in range(9)])
    produce(broker.bootstrap_servers, delete,
            [Record(b"old-%d" % i, b"y" * 30, 0, now - 3_600_000 + i) for i in range(6)]
            + [Record(b"new", b"n" * 30, 0, now)])
    config = lake_config(f"{compact},{delete}", log_cleaner_enable="false")
    run_once(config)
    assert len(rows(config, compact)) == 9
    assert [r["key"] for r in rows(config, delete)] == [b"new"]


@pytest.mark.usefixtures("spark")
def test_compact_alone_never_drops_old_segments(broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "100",
                              "retention.ms": "60000"})
    old = [Record(b"old-%d" % i, b"y" * 30, 0, 1_000_000 + i) for i in range(6)]
    produce(broker.bootstrap_servers, topic, old)
    config = lake_config(topic)
    run_once(config)
    assert len(rows(config, topic)) == 6


def test_clean_command_dry_run_changes_nothing_then_cleans(broker, topic_factory,
                                                          tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "100"})
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % (i % 3), b"z" * 30, 0) for i in range(30)])
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "spark.master": "local[2]",
        "spark.ui.enabled": "false", "log.cleaner.enable": "false"})
    run = [sys.executable, "-m", "compactor.cli"]
    subprocess.run([*run, "run", "--config", str(conf), "--once"], check=True,
                   capture_output=True, timeout=300)
    log_path = topic_paths(str(tmp_path / "lake"), topic).log
    version = DeltaTable(log_path).version()

    dry = subprocess.run([*run, "clean", "--config", str(conf), "--dry-run", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-2000:]
    planned = json.loads(dry.stdout)["partitions"]
    assert [p["action"] for p in planned] == ["would clean"]
    assert DeltaTable(log_path).version() == version

    done = subprocess.run([*run, "clean", "--config", str(conf), "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)["partitions"][0]
    assert result["action"] == "cleaned" and result["records_dropped"] > 0
    keys = defaultdict(int)
    for r in DeltaTable(log_path).to_pyarrow_table().to_pylist():
        if r["segment"] < result["first_uncleanable_offset"]:
            keys[r["key"]] += 1
    assert all(n == 1 for n in keys.values())


@pytest.mark.slow
def test_a_running_mirror_cleans_an_idle_partition_and_stops_on_sigterm(
        broker, topic_factory, tmp_path) -> None:
    import signal

    from tests.conftest import wait_until

    topic = topic_factory(1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.99",
                              "max.compaction.lag.ms": "4000"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v1", 0), Record(b"k", b"v2", 0)])
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "trigger.interval.ms": "500",
        "log.cleaner.backoff.ms": "500", "vacuum.grace.ms": "200", "spark.master": "local[2]",
        "spark.ui.enabled": "false"})
    proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config", str(conf),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log_path = topic_paths(str(tmp_path / "lake"), topic).log

    def offsets() -> list[int]:
        if not created(log_path):
            return []
        return DeltaTable(log_path).to_pyarrow_table(columns=["offset"]).column(
            "offset").to_pylist()

    try:
        wait_until(lambda: offsets() == [0, 1] or offsets() == [1], 120, "the mirrored records")
        wait_until(lambda: offsets() == [1], 60, "the cleaner to drop v1 with no new data")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads(out)
    assert summary["ingest"]["records"] == 2 and summary["cleaning"]["partitions_cleaned"] >= 1


@pytest.mark.slow
@pytest.mark.usefixtures("spark")
def test_kill_9_in_the_middle_of_a_cleaning_pass_loses_nothing(
        broker, topic_factory, lake_config, tmp_path) -> None:
    import os
    import signal

    from tests.conftest import wait_until

    topic = topic_factory(2, {"cleanup.policy": "compact", "segment.bytes": "20000"})
    records = [Record(b"k%d" % (i % 300), os.urandom(60), i % 2) for i in range(6000)]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic, log_cleaner_enable="false")
    run_once(config)
    before = {(r["partition"], r["offset"]): r["value"] for r in rows(config, topic)}
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path, "spark.master": "local[2]", "spark.ui.enabled": "false",
        "log.cleaner.io.max.bytes.per.second": "100000"})  # a pass takes several seconds
    proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "clean", "--config",
                             str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lake = tmp_path / "lake" / topic / "log"
    try:
        wait_until(lambda: any(lake.rglob(".tmp-*")), 120, "the pass to start writing")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    after = {(r["partition"], r["offset"]): r for r in rows(config, topic)}
    assert all(before[k] == r["value"] for k, r in after.items()), "a record was altered"
    latest: dict[tuple[int, bytes], int] = {}
    for (p, o), r in sorted(after.items()):
        latest[(p, r["key"])] = o
    for partition in (0, 1):
        produced = [r for r in records if r.partition == partition]
        last = {r.key: o for o, r in enumerate(produced)}
        assert all(latest[(partition, k)] == o for k, o in last.items())

    done = subprocess.run([sys.executable, "-m", "compactor.cli", "clean", "--config", str(conf),
                           "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    final = rows(config, topic)
    for partition in (0, 1):
        mine = [r for r in final if r["partition"] == partition]
        active = max(r["segment"] for r in mine)
        closed = [r["key"] for r in mine if r["segment"] < active]
        assert len(closed) == len(set(closed))
