"""Catch-up progress of a running ``compactor run`` against Apache Kafka, on its stderr."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from tests.conftest import wait_until
from tests.integration.helpers import write_config


@pytest.mark.slow
def test_progress_names_records_rate_and_the_lag_behind_the_brokers_end(
        broker, topic_factory, tmp_path: Path) -> None:
    """The broker's end offsets, asked from the progress thread, reach the operator's line:
    the records mirrored and a lag of 0 once the lake holds all of them."""
    topic = topic_factory(3, {"cleanup.policy": "delete"})
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v", i % 3) for i in range(30)])
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "trigger.interval.ms": "500",
        "spark.master": "local[2]", "spark.ui.enabled": "false"})
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                                 str(conf)], stdout=subprocess.DEVNULL, stderr=err)
        try:
            line = f"ingest {topic}: 30 records in "
            wait_until(lambda: any(line in x and "lag 0 offsets" in x and "caught up" in x
                                   for x in err_path.read_text().splitlines()),
                       120, "a progress line with the broker's end offsets")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(120)
    assert proc.returncode == 0, err_path.read_text()[-2000:]
