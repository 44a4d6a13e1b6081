"""Broker trouble: a broker that freezes mid-run and comes back, with nothing lost or doubled."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.broker import EmbeddedBroker
from compactor.workload import Record, produce
from tests.conftest import wait_until
from tests.integration.helpers import lake_offsets


@pytest.mark.slow
@pytest.mark.faults
def test_a_frozen_broker_that_comes_back_is_resumed(tmp_path) -> None:
    with EmbeddedBroker(tmp_path / "own-broker.log") as own:
        admin = AdminClient({"bootstrap.servers": own.bootstrap_servers})
        admin.create_topics([NewTopic("t", 2, 1, config={"cleanup.policy": "compact"})])[
            "t"].result(timeout=30)
        conf = tmp_path / "c.properties"
        conf.write_text(f"bootstrap.servers={own.bootstrap_servers}\ntopics=t\n"
                        f"lake.path={tmp_path / 'lake'}\ncheckpoint.path={tmp_path / 'ck'}\n"
                        "trigger.interval.ms=300\nspark.master=local[1]\n"
                        "spark.ui.enabled=false\n")
        log = str(tmp_path / "lake" / "t" / "log")

        def batch(start: int) -> list[Record]:
            return [Record(b"k%d" % i, b"v%d" % i, i % 2) for i in range(start, start + 100)]

        def mirrored() -> int:
            try:
                return len(lake_offsets(log))
            except Exception:  # not created yet
                return 0

        produce(own.bootstrap_servers, "t", batch(0))
        errors = tmp_path / "run.stderr"
        with errors.open("w") as sink:
            run = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                                    str(conf)], stdout=subprocess.DEVNULL, stderr=sink)
        try:
            wait_until(lambda: mirrored() == 100, 120, "the first records")
            own.pause()
            time.sleep(12)  # the mirror's offset requests wait, retried by the client
            assert run.poll() is None, errors.read_text()[-3000:]
            own.resume()
            produce(own.bootstrap_servers, "t", batch(100))
            wait_until(lambda: mirrored() == 200 or run.poll() is not None, 120,
                       "the mirror to resume")
            assert run.poll() is None, errors.read_text()[-3000:]
        finally:
            own.resume()
            run.send_signal(signal.SIGTERM)
            run.wait(120)
        assert run.returncode == 0, errors.read_text()[-3000:]
        got = lake_offsets(log)
        assert sorted(got) == sorted((p, o) for p in (0, 1) for o in range(100))
