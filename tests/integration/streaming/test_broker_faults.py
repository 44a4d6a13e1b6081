"""Broker trouble: a broker that freezes mid-run, briefly or for longer than the retries."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.demo.broker import EmbeddedBroker
from compactor.demo.workload import Record, produce
from tests.conftest import wait_until
from tests.integration.helpers import lake_offsets


def _setup(own: EmbeddedBroker, tmp_path: Path) -> tuple[Path, str]:
    admin = AdminClient({"bootstrap.servers": own.bootstrap_servers})
    admin.create_topics([NewTopic("t", 2, 1, config={"cleanup.policy": "compact"})])[
        "t"].result(timeout=30)
    conf = tmp_path / "c.properties"
    conf.write_text(f"bootstrap.servers={own.bootstrap_servers}\ntopics=t\n"
                    f"lake.path={tmp_path / 'lake'}\ncheckpoint.path={tmp_path / 'ck'}\n"
                    "trigger.interval.ms=300\nspark.master=local[1]\n"
                    "spark.ui.enabled=false\n"
                    # The offset requests' bound (30 s by default), shortened as a user may.
                    f"kafka.socket.timeout.ms={TIMEOUT_MS}\n")
    return conf, str(tmp_path / "lake" / "t" / "log")


TIMEOUT_MS = 10_000


def batch(start: int) -> list[Record]:
    return [Record(b"k%d" % i, b"v%d" % i, i % 2) for i in range(start, start + 100)]


def mirrored(log: str) -> int:
    try:
        return len(lake_offsets(log))
    except Exception:  # not created yet
        return 0


@pytest.mark.slow
@pytest.mark.faults
def test_a_short_freeze_is_resumed_and_a_long_one_stops_the_run_cleanly(tmp_path) -> None:
    """Frozen for less than the offset requests' bound (``kafka.socket.timeout.ms``): the
    client's retries carry the run through. Frozen past it: exit code 3 naming the broker, the
    lake as it was, and a restart once the broker is back mirrors the rest, every offset once."""
    with EmbeddedBroker(tmp_path / "own-broker.log") as own:
        conf, log = _setup(own, tmp_path)
        produce(own.bootstrap_servers, "t", batch(0))
        errors = tmp_path / "run.stderr"
        with errors.open("w") as sink:
            run = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                                    str(conf)], stdout=subprocess.DEVNULL, stderr=sink)
        try:
            wait_until(lambda: mirrored(log) == 100, 120, "the first records")
            own.pause()
            time.sleep(TIMEOUT_MS / 2000)  # the offset requests wait, retried by the client
            assert run.poll() is None, errors.read_text()[-3000:]
            own.resume()
            produce(own.bootstrap_servers, "t", batch(100))
            wait_until(lambda: mirrored(log) == 200 or run.poll() is not None, 120,
                       "the mirror to resume")
            assert run.poll() is None, errors.read_text()[-3000:]

            own.pause()
            paused = time.monotonic()
            wait_until(lambda: run.poll() is not None, 150, "the run to give up")
            gave_up = time.monotonic() - paused
        finally:
            own.resume()
            if run.poll() is None:
                run.kill()
            run.wait(60)
        stderr = errors.read_text()
        assert run.returncode == 3, stderr[-3000:]
        assert own.bootstrap_servers in stderr
        # After the configured bound, not before it and not after the 30 s default.
        assert TIMEOUT_MS / 1000 - 1 <= gave_up < 30, f"gave up after {gave_up:.0f}s"
        assert sorted(lake_offsets(log)) == sorted((p, o) for p in (0, 1) for o in range(100))

        produce(own.bootstrap_servers, "t", batch(200))
        again = subprocess.run([sys.executable, "-m", "compactor.cli", "run", "--once",
                                "--config", str(conf)], capture_output=True, text=True,
                               timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        got = lake_offsets(log)
        assert sorted(got) == sorted((p, o) for p in (0, 1) for o in range(150))
