"""Bad input: odd records are mirrored byte for byte, bad lakes fail with a clear message."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from tests.integration.helpers import log_table, run_once

TEN_MB = 10 * 1024 * 1024
PAST_MS = 31_536_000_000  # 1971-01-01
FUTURE_MS = 4_102_444_800_000  # 2100-01-01


@pytest.mark.usefixtures("spark")
def test_odd_records_are_mirrored_exactly(broker, topic_factory, lake_config) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "max.message.bytes": str(2 * TEN_MB)})
    big = bytes(range(256)) * (TEN_MB // 256)
    records = [
        Record(b"\xff\xfe\x00", b"non-UTF-8 key", 0, 1_700_000_000_000),
        Record(b"empty", b"", 0, 1_700_000_000_001),  # an empty value is a value
        Record(b"null", None, 0, 1_700_000_000_002),  # a null value is a tombstone
        Record(b"headers", b"v", 0, 1_700_000_000_003,
               (("null", None), ("empty", b""), ("dup", b"1"), ("dup", b"2"))),
        Record(b"big", big, 0, 1_700_000_000_004),
        Record(b"past", b"v", 0, PAST_MS),
        Record(b"future", b"v", 0, FUTURE_MS),
    ]
    produce(broker.bootstrap_servers, topic, records, extra_config={
        "message.max.bytes": str(2 * TEN_MB)})
    config = lake_config(topic, log_cleaner_enable="false")
    summary = run_once(config)
    assert summary.ingest.records == len(records) and summary.ingest.rejected == 0
    rows = log_table(config, topic).to_pylist()
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (i, r.key, r.value) for i, r in enumerate(records)]
    assert [(h["key"], h["value"]) for h in rows[3]["headers"]] == list(records[3].headers)
    stamps = [int(r["timestamp"].timestamp() * 1000) for r in rows]
    assert stamps == [r.timestamp_ms for r in records]
    assert rows[6]["timestamp"] == dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
    # The lake's files: readable by the owner, writable by nobody else (umask respected).
    for path in Path(config.lake_path).rglob("*"):
        assert path.stat().st_mode & 0o400 and not path.stat().st_mode & 0o002, path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compactor.cli", *args], capture_output=True,
                          text=True, timeout=180)


def _produce_with_raw_header_key(servers: str, topic: str, key: bytes, header_key: bytes) -> None:
    """librdkafka writes header keys as text only; Kafka's own protocol takes any bytes, as
    other clients send them (kafka-python, with the key's encoding bypassed)."""
    from kafka import KafkaProducer

    class RawKey(str):
        def encode(self, *_args: object, **_kwargs: object) -> bytes:  # type: ignore[override]
            return header_key

    producer = KafkaProducer(bootstrap_servers=servers)
    try:
        producer.send(topic, key=key, value=b"bad-headers", headers=[(RawKey("k"), b"h")],
                      partition=0).get(timeout=30)
    finally:
        producer.close()


@pytest.mark.usefixtures("spark")
def test_a_record_whose_headers_cannot_be_read_is_mirrored_and_reported(
        broker, topic_factory, lake_config) -> None:
    """One record must not stop the mirror: its key, value and offset go to the log with null
    headers (a tombstone still erases), and L/T/rejected says why."""
    from compactor.lake.rejected import HEADERS_REASON
    from tests.integration.helpers import rejected_table

    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"a", b"1", 0, headers=(("h", b"x"),))])
    _produce_with_raw_header_key(broker.bootstrap_servers, topic, b"b", b"\xff\xfe-not-utf8")
    produce(broker.bootstrap_servers, topic, [Record(b"c", b"3", 0)])
    config = lake_config(topic, log_cleaner_enable="false")
    summary = run_once(config)
    assert summary.ingest.records == 3 and summary.ingest.rejected == 1
    rows = log_table(config, topic).to_pylist()
    assert [(r["offset"], r["key"], r["headers"]) for r in rows] == [
        (0, b"a", [{"key": "h", "value": b"x"}]), (1, b"b", None), (2, b"c", [])]
    rejected = rejected_table(config, topic).to_pylist()
    assert [(r["offset"], r["key"], r["value"], r["reason"]) for r in rejected] == [
        (1, b"b", b"bad-headers", HEADERS_REASON)]
    produce(broker.bootstrap_servers, topic, [Record(b"d", b"4", 0)])
    assert run_once(config).ingest.records == 1  # and the mirror goes on


def test_an_unusable_lake_path_exits_4_with_the_path(broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", 0)])
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    conf = tmp_path / "c.properties"
    conf.write_text(f"bootstrap.servers={broker.bootstrap_servers}\ntopics={topic}\n"
                    f"lake.path={blocker}/lake\ncheckpoint.path={tmp_path}/ck\n"
                    "spark.master=local[1]\nspark.ui.enabled=false\n")
    result = _cli("run", "--config", str(conf), "--once")
    assert result.returncode == 4, result.stderr[-3000:]
    assert f"cannot create lake directory {blocker}/lake/{topic}/log" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_corrupted_delta_log_is_named_not_guessed(tmp_path: Path) -> None:
    from tests.lake import append, offline_config

    config = offline_config(str(tmp_path / "lake"), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"k", b"v", 1_700_000_000_000)], now_ms=1_700_000_000_000)
    commits = sorted((tmp_path / "lake" / "t" / "log" / "_delta_log").glob("*.json"))
    commits[-1].write_text('{"add": {"path": truncated')
    conf = tmp_path / "c.properties"
    conf.write_text(f"bootstrap.servers=127.0.0.1:9\ntopics=t\nlake.path={tmp_path}/lake\n"
                    "cleanup.policy=compact\nkafka.socket.timeout.ms=2000\n")
    for verb in (["status"], ["read", "--topic", "t"]):
        result = _cli(*verb, "--config", str(conf))
        assert result.returncode == 4, (verb, result.stderr[-3000:])
        assert f"{tmp_path}/lake/t/log" in result.stderr and "Traceback" not in result.stderr
