"""Failures of the machine under the mirror: each one line naming its cause, and its exit code."""

from __future__ import annotations

import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from tests.integration.helpers import write_config

COMPACTOR = [sys.executable, "-m", "compactor.cli"]


def _config(path: Path, broker, topic: str, lake: Path, **extra: str) -> Path:
    return write_config(path, **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic, "lake.path": str(lake),
        "spark.master": "local[2]", "spark.ui.enabled": "false", **extra})


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("compactor: error:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def _leftovers(lake: Path) -> list[Path]:
    return sorted(p for p in lake.rglob("*") if p.name.startswith((".tmp-", ".compactor-probe")))


@pytest.mark.slow
def test_a_file_too_large_for_the_disk_exits_4_naming_the_path_and_errno(
        broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, os.urandom(200_000), 0) for i in range(10)])
    lake = tmp_path / "lake"
    conf = _config(tmp_path / "c.properties", broker, topic, lake)

    def small_files() -> None:  # every process of the run: the driver, its JVM, the workers
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000))

    result = subprocess.run([*COMPACTOR, "run", "--config", str(conf), "--once"],
                            capture_output=True, text=True, timeout=300, preexec_fn=small_files)
    assert result.returncode == 4, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert f"cannot write a data file in {lake / topic / 'log'}/partition=0/segment=0" in line
    assert "File too large" in line
    assert _leftovers(lake) == []


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="compactor-ro-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_a_lake_it_may_not_write_exits_4_naming_the_path_and_errno(
        broker, topic_factory, shared_dir) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run the command as another user")
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", 0)])
    lake, home = shared_dir / "lake", shared_dir / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    conf = _config(shared_dir / "c.properties", broker, topic, lake,
                   **{"checkpoint.path": str(home / "checkpoints")})
    first = subprocess.run([*COMPACTOR, "run", "--config", str(conf), "--once"],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    for path in [shared_dir, *shared_dir.rglob("*")]:
        if not path.is_relative_to(home):
            path.chmod(0o755 if path.is_dir() else 0o644)  # readable by all, writable by root
    result = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *COMPACTOR, "run",
         "--config", str(conf), "--once"], capture_output=True, text=True, timeout=300,
        env={**os.environ, "HOME": str(home)}, cwd=home)
    assert result.returncode == 4, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert str(lake / topic / "log") in line
    assert "Permission denied (os error 13)" in line


@pytest.mark.slow
def test_a_data_file_missing_from_the_log_exits_4_naming_it(
        broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2) for i in range(20)])
    lake = tmp_path / "lake"
    conf = _config(tmp_path / "c.properties", broker, topic, lake)
    first = subprocess.run([*COMPACTOR, "run", "--config", str(conf), "--once"],
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    gone = sorted((lake / topic / "log" / "partition=1").rglob("*.parquet"))[0]
    gone.unlink()
    result = subprocess.run([*COMPACTOR, "run", "--config", str(conf), "--once"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 4, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert "1 data file(s) its Delta log lists are missing" in line
    assert str(gone.relative_to(lake / topic / "log")) in line


def test_a_metrics_port_in_use_exits_2_before_spark_starts(
        broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(1)
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        conf = _config(tmp_path / "c.properties", broker, topic, tmp_path / "lake",
                       **{"metrics.port": str(port)})
        result = subprocess.run([*COMPACTOR, "run", "--config", str(conf), "--once"],
                                capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    line = _error_line(result.stderr)
    assert f"metrics.port={port}: cannot listen on it: Address already in use" in line
    assert "Traceback" not in result.stderr and "log4j" not in result.stderr  # no JVM started
