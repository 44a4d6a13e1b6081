"""``compactor status`` against a known log: the broker, a mirrored lake, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from tests.integration.helpers import run_once, write_config


@pytest.mark.usefixtures("spark")
def test_status_json_describes_a_known_log(broker, topic_factory, lake_config, tmp_path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact", "segment.bytes": "100",
                              "max.compaction.lag.ms": "3600000"})
    records = [Record(b"k%d" % (i % 4), b"v" * 30, 0) for i in range(10)]
    records += [Record(b"only", b"x", 1), Record(b"only", None, 1)]
    config = lake_config(topic, log_cleaner_enable="false")
    produce(broker.bootstrap_servers, topic, records[:8])
    run_once(config)
    produce(broker.bootstrap_servers, topic, records[8:])  # two not mirrored yet on p0

    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path})
    result = subprocess.run([sys.executable, "-m", "compactor.cli", "status", "--config",
                             str(conf), "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    status = json.loads(result.stdout)
    assert status["broker_error"] is None
    [t] = status["topics"]
    assert t["topic"] == topic and t["cleanup_policy"] == "compact"
    assert t["max_compaction_lag_ms"] == 3600000
    p0, p1 = t["partitions"]
    # p0: 8 records mirrored (32 record bytes each: 3 per 100-byte segment), 2 more waiting.
    assert (p0["broker_end_offset"], p0["mirrored_offset"], p0["lag"]) == (10, 8, 2)
    assert (p0["log_start_offset"], p0["log_end_offset"], p0["segments"]) == (0, 8, 3)
    assert p0["active_segment"] == 6 and p0["first_dirty_offset"] == 0
    assert p0["first_uncleanable_offset"] == 6
    assert (p0["clean_bytes"], p0["dirty_bytes"], p0["dirty_ratio"]) == (0, 2 * 3 * 32, 1.0)
    assert p0["overdue"] is False and p0["next_forced_cleaning_ms"] is not None
    log_dir = Path(config.lake_path) / topic / "log" / "partition=0"
    assert p0["records"] == 8
    assert p0["size_bytes"] == sum(f.stat().st_size for f in log_dir.rglob("*.parquet"))
    # p1 was empty when the lake was written: only the broker knows it.
    assert (p1["broker_end_offset"], p1["mirrored_offset"], p1["segments"]) == (2, 0, 0)
    assert t["erasure"] == {"pending": 0, "oldest_pending_age_ms": None, "missed_deadlines": 0}

    # With the broker out of reach the lake still answers, and the exit code stays 0.
    down = write_config(tmp_path / "down.properties", **{
        "bootstrap.servers": "127.0.0.1:9", "topics": topic, "lake.path": config.lake_path,
        "cleanup.policy": "compact", "segment.bytes": "100"})
    offline = subprocess.run([sys.executable, "-m", "compactor.cli", "status", "--config",
                              str(down), "--json"], capture_output=True, text=True, timeout=120)
    assert offline.returncode == 0, offline.stderr[-2000:]
    lake_only = json.loads(offline.stdout)
    assert "cannot reach Kafka" in lake_only["broker_error"]
    [p0_offline] = lake_only["topics"][0]["partitions"]
    assert (p0_offline["broker_end_offset"], p0_offline["mirrored_offset"]) == (None, 8)

    table = subprocess.run([sys.executable, "-m", "compactor.cli", "status", "--config",
                            str(conf)], capture_output=True, text=True, timeout=120)
    assert table.returncode == 0 and f"{topic} (cleanup.policy=compact" in table.stdout
    assert "erasures pending 0" in table.stdout


@pytest.mark.usefixtures("spark")
def test_status_watch_sees_the_broker_move_between_refreshes(broker, topic_factory, lake_config,
                                                             tmp_path) -> None:
    """``--watch`` keeps one consumer for the broker's end offsets; each refresh still sees
    records produced since the last."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    config = lake_config(topic, log_cleaner_enable="false")
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", 0) for i in range(4)])
    run_once(config)
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": config.lake_path})
    proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "status", "--config",
                             str(conf), "--json", "--watch", "0.3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None

        def lag() -> int:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, proc.stderr.read()[-2000:]  # type: ignore[union-attr]
            return int(json.loads(line)["topics"][0]["partitions"][0]["lag"])

        assert lag() == 0
        produce(broker.bootstrap_servers, topic, [Record(b"n%d" % i, b"v", 0) for i in range(3)])
        seen = []
        while 3 not in seen and len(seen) < 60:  # 60 refreshes, 0.3 s apart: ample
            seen.append(lag())
        assert seen[-1] == 3, seen
    finally:
        proc.kill()
        proc.wait()
