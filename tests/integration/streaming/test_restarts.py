"""A busy host: Spark's Python planner processes that connect back too late.

Spark waits a fixed 10 s for the Python process it starts to run the source's offsets (its
other planning processes are forked by a daemon, which it waits for). Here the interpreter
Spark starts for that is slower than 10 s the first time, as on a loaded machine: the run
starts the query again and mirrors every record, as if nothing happened.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from tests.integration.helpers import compactor, lake_offsets, write_config

# The first start of each of these modules waits past Spark's 10 s before running Python.
_SLOW_ONCE = ("python_streaming_source_runner",)


def _slow_python(tmp_path: Path) -> Path:
    """An interpreter that is slow to start, once per planning module."""
    script = tmp_path / "slow-python"
    cases = "\n".join(
        f'  *{module}*) [ -e "{tmp_path}/{module}.slowed" ] || '
        f'{{ touch "{tmp_path}/{module}.slowed"; sleep 12; }} ;;' for module in _SLOW_ONCE)
    script.write_text(f'#!/bin/sh\ncase "$*" in\n{cases}\nesac\nexec "{sys.executable}" "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.mark.slow
def test_a_python_worker_late_to_connect_back_restarts_the_query(
        broker, topic_factory, tmp_path: Path) -> None:
    topic = topic_factory(2)
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v%d" % i, i % 2) for i in range(40)])
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "checkpoint.path": str(tmp_path / "ck"),
        "spark.master": "local[1]", "spark.ui.enabled": "false",
        "spark.pyspark.python": str(_slow_python(tmp_path))})
    done = compactor("run", "--once", "--config", str(conf), timeout=420)
    assert done.returncode == 0, done.stderr[-3000:]
    slowed = sorted(p.name for p in tmp_path.glob("*.slowed"))
    assert slowed == sorted(f"{m}.slowed" for m in _SLOW_ONCE), slowed  # it was late
    assert done.stderr.count("starting it again from its checkpoint") == len(_SLOW_ONCE), \
        done.stderr[-3000:]
    offsets = sorted(lake_offsets(topic_paths(str(tmp_path / "lake"), topic).log))
    assert offsets == sorted((p, o) for p in (0, 1) for o in range(20))
