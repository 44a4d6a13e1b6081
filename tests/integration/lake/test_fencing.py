"""Two ``compactor run`` on one topic and lake: the newer fences the older, nothing is corrupted."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.positions import WRITER
from tests.conftest import wait_until
from tests.integration.helpers import created, lake_offsets


def start(conf: Path, errors: Path) -> subprocess.Popen[bytes]:
    with errors.open("w") as sink:
        return subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config",
                                 str(conf)], stdout=subprocess.DEVNULL, stderr=sink)


def offsets(log: Path) -> list[tuple[int, int]]:
    return lake_offsets(str(log))


@pytest.mark.slow
def test_a_second_run_fences_the_first_with_a_clear_message(
        broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    conf = tmp_path / "c.properties"
    conf.write_text(f"bootstrap.servers={broker.bootstrap_servers}\ntopics={topic}\n"
                    f"lake.path={tmp_path / 'lake'}\ncheckpoint.path={tmp_path / 'ck'}\n"
                    "trigger.interval.ms=300\nspark.master=local[1]\nspark.ui.enabled=false\n")
    log = tmp_path / "lake" / topic / "log"

    def batch(start: int) -> list[Record]:
        return [Record(b"k%d" % (i % 30), b"v%d" % i, i % 2) for i in range(start, start + 100)]

    def generation() -> int | None:
        return (WRITER.read(DeltaTable(str(log)))
                if created(log) else None)

    produce(broker.bootstrap_servers, topic, batch(0))
    first = start(conf, tmp_path / "first.stderr")
    second = None
    try:
        wait_until(lambda: generation() == 1 and len(offsets(log)) == 100, 120,
                   "the first run to mirror")
        second = start(conf, tmp_path / "second.stderr")
        wait_until(lambda: generation() == 2, 120, "the second run's claim")
        produce(broker.bootstrap_servers, topic, batch(100))
        wait_until(lambda: first.poll() is not None, 120, "the first run to stop")
        message = (tmp_path / "first.stderr").read_text()
        assert first.returncode == 4, message[-3000:]
        assert "another 'compactor run' claimed this log (writer generation 2; this run " \
               "holds 1)" in message.replace("\n", " ")
        wait_until(lambda: len(offsets(log)) == 200, 120, "the second run to mirror the rest")
        assert second.poll() is None, (tmp_path / "second.stderr").read_text()[-2000:]
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(120)
    assert second is not None and second.returncode == 0
    got = offsets(log)
    assert sorted(got) == sorted({(p, o) for p in (0, 1) for o in range(100)})
