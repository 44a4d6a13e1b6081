"""Many partitions and topics on Apache Kafka: every record once, at its offset, in its log.

``compactor run`` (a real process) mirrors a 200-partition topic in micro-batches of a few
thousand records, each written by one task per core over many partitions, and is killed with
SIGKILL while a batch's files are written but not committed. A new run must leave every
partition holding each of its records exactly once, at the offset Kafka gave it. A mirror of
several topics writes a task's files of all of them together; each lands in its own topic's log.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
from deltalake import DeltaTable

from compactor.config import build_config, resolve_config
from compactor.demo.workload import Record, produce
from tests.conftest import overrides_for, wait_until
from tests.integration.faults.aims import in_flight
from tests.integration.faults.truth import committed
from tests.integration.helpers import log_table, run_once

PARTITIONS = 200
# Kafka keeps each partition in send order only with idempotence: without it a retried batch
# (leaders of a new 200-partition topic still moving) can land after a later one.
IN_ORDER = {"enable.idempotence": "true"}


def _records(round_: int, per_partition: int) -> list[Record]:
    return [Record(b"k%d-%d" % (p, i % 7), b"r%d-p%d-%d" % (round_, p, i), p)
            for i in range(per_partition) for p in range(PARTITIONS)]


def test_a_batch_over_three_topics_puts_each_record_in_its_own_topics_log(
        kafka: Any, kafka_topic: Any, tmp_path: Path) -> None:
    """One micro-batch over three topics of 12 partitions on two cores: each write task holds
    18 files of all three topics, which are encoded together. Each topic's log, read back
    with delta-rs, holds exactly its own records, each at the offset Kafka gave it, and no
    temporary file is left in the lake."""
    servers = kafka.bootstrap_servers
    topics = [kafka_topic(12, {"cleanup.policy": "delete"}) for _ in range(3)]
    sent = {t: [Record(b"k%d" % p, b"%s-p%d-%d" % (t.encode(), p, i), p)
                for i in range(3) for p in range(12)] for t in topics}
    for t, records in sent.items():
        produce(servers, t, records, extra_config=IN_ORDER)
    config = resolve_config(build_config({
        "bootstrap.servers": servers, "topics": ",".join(topics),
        "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "ck"),
        "spark.master": "local[2]", **overrides_for(",".join(topics))}))
    run_once(config)

    for t in topics:
        rows = log_table(config, t)
        got = list(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
                       rows.column("value").to_pylist(), strict=True))
        expected = sorted((r.partition, i, r.value) for p in range(12) for i, r in enumerate(
            [r for r in sent[t] if r.partition == p]))
        assert got == expected, t
    assert [f for f in (tmp_path / "lake").rglob("*") if f.name.startswith(".tmp-")] == []


def test_a_kill_mid_batch_over_200_partitions_loses_and_repeats_nothing(
        kafka: Any, kafka_topic: Any, tmp_path: Path) -> None:
    servers = kafka.bootstrap_servers
    topic = kafka_topic(PARTITIONS, {"cleanup.policy": "delete"})
    sent = _records(0, 40)
    produce(servers, topic, sent, extra_config=IN_ORDER)
    conf = tmp_path / "c.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in {
        "bootstrap.servers": servers, "topics": topic, "lake.path": str(tmp_path / "lake"),
        "checkpoint.path": str(tmp_path / "ck"), "trigger.interval.ms": "200",
        "max.offsets.per.trigger": "1500", "spark.master": "local[2]",
        "spark.ui.enabled": "false", **overrides_for(topic)}.items()))
    log_dir = tmp_path / "lake" / topic / "log"
    errors = tmp_path / "run.stderr"
    with errors.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                                 str(conf)], stdout=subprocess.DEVNULL, stderr=sink)
    caught = False
    try:
        wait_until(lambda: proc.poll() is not None or committed(log_dir), 180,
                   "the first ingest commit")
        assert proc.poll() is None, errors.read_text()[-3000:]
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and not caught:
            caught = in_flight(log_dir)
            time.sleep(0.002)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert caught, "no batch was caught between its files and its commit"
    more = _records(1, 5)
    produce(servers, topic, more, extra_config=IN_ORDER)

    done = subprocess.run([sys.executable, "-m", "compactor.cli", "run", "--once", "--config",
                           str(conf)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    rows = DeltaTable(str(log_dir)).to_pyarrow_table(columns=["partition", "offset", "value"])
    assert rows.num_rows == len(sent) + len(more)
    for p in range(PARTITIONS):
        mine = rows.filter(pc.equal(rows.column("partition"), p)).sort_by("offset")
        expected = [r.value for r in sent + more if r.partition == p]
        assert mine.column("offset").to_pylist() == list(range(len(expected))), p
        assert mine.column("value").to_pylist() == expected, p
