"""The lakehouse around the mirror: delta-spark reads and follows the mirror's tables.

delta-spark (the Delta Lake users run in Spark) reads every table the mirror writes with the
rows deltalake reads, shows a history that says what each commit did, travels back in time,
and follows the log with Structured Streaming while the mirror ingests, cleans and vacuums.
It runs in an environment of its own (``tests/lakehouse/delta_spark.py``).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from tests.conftest import wait_until
from tests.integration.helpers import created, run_once, write_config
from tests.lakehouse.delta_spark import job_result, run_job, start_job


def _records(path: str) -> list[list[object]]:
    """Every column of every row of a log as delta-spark's ``records`` job gives them,
    read by deltalake."""
    rows = DeltaTable(path).to_pyarrow_table().sort_by([("partition", "ascending"),
                                                       ("offset", "ascending")]).to_pylist()

    def hexed(data: bytes | None) -> str | None:
        return None if data is None else data.hex().upper()

    return [[r["partition"], r["offset"], hexed(r["key"]), hexed(r["value"]), r["topic"],
             r["timestampType"],
             (r["timestamp"] - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(
                 microseconds=1), r["deleteHorizonMs"], r["segment"],
             None if r["headers"] is None else json.dumps(  # to_json leaves out nulls
                 [{k: v for k, v in (("k", h["key"]), ("v", hexed(h["value"])))
                   if v is not None} for h in r["headers"]],
                 separators=(",", ":"), ensure_ascii=False)]
            for r in rows]


def _positions(path: str, version: int | None = None) -> list[list[int]]:
    table = DeltaTable(path, version=version).to_pyarrow_table(columns=["partition", "offset"])
    return sorted([p, o] for p, o in zip(table.column("partition").to_pylist(),
                                         table.column("offset").to_pylist(), strict=True))


@pytest.mark.slow
def test_delta_spark_reads_every_table_as_deltalake_does(
        broker, topic_factory, lake_config) -> None:
    # Kafka refuses null keys on a compacted topic; a topic the mirror is told is compact
    # takes them, and they go to L/T/rejected.
    topic = topic_factory(2, {"cleanup.policy": "delete"})
    # Each key in both partitions: its older values leave the other partition's log, a commit
    # that removes files (compactor/lake/moved_keys.py), as cleaning does.
    records = [Record(b"k%d" % (i % 7), b"v%d" % i, i % 2) for i in range(60)]
    records += [Record(b"k1", None, 1), Record(None, b"no key", 0)]
    produce(broker.bootstrap_servers, topic, records)
    config = lake_config(topic, **{f"topic.{topic}.cleanup.policy": "compact",
                                   f"topic.{topic}.vacuum.grace.ms": "3600000"})
    run_once(config)
    paths = topic_paths(config.lake_path, topic)
    tables = {"log": paths.log, "table": paths.table, "rejected": paths.rejected,
              "erasures": f"{paths.root}/erasures"}
    # A topic of many partitions: a write task encodes its small files itself
    # (compactor/lake/parquet_encoder.py), headers of every shape included.
    wide = topic_factory(40, {"cleanup.policy": "delete"})
    shapes: list[tuple[tuple[str, bytes | None], ...]] = [
        (), (("trace", b"\x00\xff"),), (("a", None), ("b", b"")), (("é", b"x"),) * 3]
    produce(broker.bootstrap_servers, wide, [
        Record(b"w%d" % i, None if i % 9 == 4 else b"v%d" % i, i % 40, headers=shapes[i % 4])
        for i in range(80)])
    wide_config = lake_config(wide, log_cleaner_enable="false")
    run_once(wide_config)
    tables["wide log"] = topic_paths(wide_config.lake_path, wide).log
    wide_files = DeltaTable(tables["wide log"]).file_uris()
    assert wide_files and all(pq.ParquetFile(f).metadata.created_by.startswith(
        "kafka-lake-compactor") for f in wide_files)

    seen = run_job({"batch": tables})
    assert run_job({"records": [tables["wide log"]]})[tables["wide log"]] == \
        _records(tables["wide log"])

    for name in tables:
        assert seen[name]["rows"] == _positions(tables[name]), name
    assert seen["wide log"]["rows"] == [[p, o] for p in range(40) for o in (0, 1)]
    assert seen["rejected"]["rows"] == [[0, 30]]
    # Every commit of the mirror says what it did, in the column DESCRIBE HISTORY shows
    # (delta-rs's own VACUUM START / END name themselves).
    for name in ("log", "table", "wide log"):
        notes = [(op, note) for _, op, note in seen[name]["history"]
                 if not op.startswith("VACUUM")]
        assert notes and all(n and n.startswith("compactor: ") for _, n in notes), notes
    assert any("dropped from partition" in n for _, _, n in seen["log"]["history"])
    # Time travel to the oldest version the log keeps gives deltalake's rows of that version.
    version, rows = seen["log"]["oldest"]
    assert rows == _positions(tables["log"], version)
    # Reading the folder as plain Parquet also reads files cleaning removed (kept for the
    # vacuum grace): never read a table that way.
    assert seen["log"]["parquet_rows"] > len(seen["log"]["rows"])


@pytest.mark.slow
def test_a_delta_stream_follows_the_log_while_the_mirror_cleans_and_vacuums(
        broker, topic_factory, tmp_path: Path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "ck"),
        "trigger.interval.ms": "500", "log.cleaner.backoff.ms": "500",
        f"topic.{topic}.segment.bytes": "2000", f"topic.{topic}.min.cleanable.dirty.ratio":
        "0.05", f"topic.{topic}.vacuum.grace.ms": "20000", "spark.master": "local[1]",
        "spark.ui.enabled": "false"})
    produce(broker.bootstrap_servers, topic, [Record(b"k0", b"first", 0)])
    mirror = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                               str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    log = topic_paths(str(tmp_path / "lake"), topic).log
    sent = [1, 0]  # records sent to partitions 0 and 1
    stop = threading.Event()

    def keep_producing() -> None:
        i = 0
        while not stop.is_set() and i < 600:
            produce(broker.bootstrap_servers, topic,
                    [Record(b"k%d" % (j % 5), b"v%d-%d" % (i, j), j % 2) for j in range(20)])
            sent[0] += 10
            sent[1] += 10
            i += 1
            time.sleep(0.5)

    def vacuumed() -> bool:
        history = DeltaTable(log).history()
        return (any((h.get("userMetadata") or "").startswith("compactor: clean")
                    for h in history)
                and any(h.get("operation") == "VACUUM END" for h in history))

    def last_offsets() -> list[int]:
        ends = [-1, -1]
        for p, o in _positions(log):
            ends[p] = max(ends[p], o)
        return ends

    result: dict[str, Any] = {}
    ready, appended = tmp_path / "stream-ready", tmp_path / "all-appended"
    try:
        wait_until(lambda: len(_positions(log)) == 1 if created(log)
                   else False, 180, "the mirror's first record")
        # The stream starts from the log as it stands (one record), then every append.
        follower = start_job({"stream": log, "seconds": 600, "until": 10**9,
                              "ready": str(ready), "stop": str(appended)})
        wait_until(lambda: ready.exists() or follower.poll() is not None, 300,
                   "the delta-spark stream's first micro-batch")
        producer = threading.Thread(target=keep_producing, daemon=True)
        producer.start()
        # Records keep coming until the mirror has cleaned and vacuumed the log under the
        # stream; then the stream reads what the mirror appended, to the last record.
        wait_until(lambda: vacuumed() or follower.poll() is not None, 300,
                   "a clean and a vacuum of the log while the stream follows it")
        stop.set()
        producer.join(60)
        wait_until(lambda: last_offsets() == [n - 1 for n in sent] or mirror.poll() is not None,
                   180, "the mirror to append every record sent")
        appended.touch()
        result = job_result(follower)
    finally:
        stop.set()
        mirror.terminate()
        _, stderr = mirror.communicate(timeout=120)
    assert mirror.returncode == 0, stderr[-3000:]
    assert result["error"] is None, result["error"]
    assert vacuumed()  # files were deleted under the stream
    # Every record the mirror appended reached the stream, once: cleaning and vacuum, which
    # remove files, never stopped it nor made it read a record twice.
    seen = [tuple(p) for p in result["seen"]]
    assert len(seen) == len(set(seen)) == sum(sent)
