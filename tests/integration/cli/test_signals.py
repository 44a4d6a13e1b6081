"""``compactor run`` as systemd and a terminal stop it, and run from a user's own directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from tests.conftest import wait_until
from tests.integration.helpers import created, free_port, lake_offsets, write_config

SHADOW = 'raise ImportError("the user\'s own {name}/ folder was imported")\n'


def _config(tmp_path: Path, broker, topic: str) -> Path:
    return write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "trigger.interval.ms": "300",
        "spark.master": "local[2]", "spark.ui.enabled": "false"})


def _start(conf: Path, cwd: Path) -> subprocess.Popen[str]:
    # A process group of its own, as systemd and a terminal give a service.
    return subprocess.Popen(
        [sys.executable, "-m", "compactor.cli", "run", "--config", str(conf),
         "--log-level", "WARNING"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)


def _signalled(proc: subprocess.Popen[str], ready: Callable[[], bool], what: str,
               *signals: int, wait_s: float = 180, timeout: float = 120) -> str:
    """Once ``ready``, send ``signals`` to the run's whole group (driver, JVM and workers
    alike), in order; its stderr once it ended (a run still going then is killed)."""
    try:
        wait_until(ready, wait_s, what)
        for signum in signals:
            os.killpg(proc.pid, signum)
        _, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return stderr


def _mirrored(lake: Path, topic: str, n: int) -> bool:
    log = lake / topic / "log"
    return created(log) and len(lake_offsets(str(log))) >= n


def _product_lines(stderr: str) -> list[str]:
    """What the product itself wrote: Python's log lines and its own messages, not the JVM's
    start-up notes."""
    return [line for line in stderr.splitlines()
            if " streaming." in line or " compactor" in line or line.startswith("compactor:")
            or "Traceback" in line or "ERROR" in line]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_stops_after_the_commit_exit_0(
        broker, topic_factory, tmp_path, signum) -> None:
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2) for i in range(300)])
    proc = _start(_config(tmp_path, broker, topic), tmp_path)
    stderr = _signalled(proc, lambda: _mirrored(tmp_path / "lake", topic, 300),
                        "the first records", signum)
    assert proc.returncode == 0, stderr[-3000:]
    lines = _product_lines(stderr)
    assert len(lines) == 1 and f"received {signal.Signals(signum).name}" in lines[0], lines
    assert sorted(lake_offsets(str(tmp_path / "lake" / topic / "log"))) == sorted(
        (p, o) for p in range(2) for o in range(150))


@pytest.mark.slow
def test_a_second_signal_stops_at_once_with_exit_130(broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", 0)])
    proc = _start(_config(tmp_path, broker, topic), tmp_path)
    # Two signals while the driver is held, so the first cannot finish before the second
    # arrives (two of one kind would merge into one pending signal).
    stderr = _signalled(proc, lambda: _mirrored(tmp_path / "lake", topic, 1), "the first record",
                        signal.SIGSTOP, signal.SIGINT, signal.SIGTERM, signal.SIGCONT,
                        timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    assert ": stopping now, without waiting for the current commit" in stderr
    assert "Traceback" not in stderr
    assert DeltaTable(str(tmp_path / "lake" / topic / "log")).version() >= 1


@pytest.mark.slow
def test_folders_of_the_users_own_cannot_shadow_the_product(
        broker, topic_factory, tmp_path) -> None:
    """A Spark job's directory often holds ./checkpoints; Python workers must not import it."""
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k%d" % i, b"v", i % 2) for i in range(50)])
    work = tmp_path / "job"
    for name in ("checkpoints", "streaming", "compactor", "pyspark"):
        (work / name).mkdir(parents=True)
        (work / name / "__init__.py").write_text(SHADOW.format(name=name))
    conf = _config(tmp_path, broker, topic)
    result = subprocess.run(  # the console script, as a user runs it
        [str(Path(sys.executable).with_name("compactor")), "run", "--config", str(conf),
         "--once"], cwd=work, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "folder was imported" not in result.stderr
    assert len(lake_offsets(str(tmp_path / "lake" / topic / "log"))) == 50


def test_python_workers_run_with_a_safe_path(spark) -> None:
    """Python leaves a ``-m`` module's working directory off sys.path (PYTHONSAFEPATH)."""
    def probe(_: int) -> tuple[bool, list[str]]:
        return bool(sys.flags.safe_path), list(sys.path)

    safe, path = spark.sparkContext.parallelize([0], 1).map(probe).collect()[0]
    assert safe and "" not in path


def test_a_run_with_nothing_to_mirror_prints_nothing_at_error(broker, topic_factory,
                                                               tmp_path) -> None:
    """``run --once`` on an empty topic ends before its Python workers are warm; stopping the
    session under them made Spark log two crashed workers at ERROR after a run that
    succeeded."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", 0)])
    conf = _config(tmp_path, broker, topic)
    for _ in range(2):  # the first run mirrors the record; the second finds nothing new
        done = subprocess.run([sys.executable, "-m", "compactor.cli", "run", "--once",
                               "--config", str(conf)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert [line for line in done.stderr.splitlines()
                if "ERROR" in line or "Traceback" in line] == []


@pytest.mark.slow
def test_ctrl_c_during_start_up_stops_quietly(broker, topic_factory, tmp_path) -> None:
    """A terminal's Ctrl-C reaches the whole group (driver and JVM) while Spark starts: one
    line says so, the run exits 0, and no traceback follows."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    proc = _start(_config(tmp_path, broker, topic), tmp_path)
    stderr = _signalled(proc, (tmp_path / "lake" / topic / "log" / "_delta_log").exists,
                        "the run to claim its log (Spark is starting)", signal.SIGINT,
                        wait_s=120)
    assert proc.returncode == 0, stderr[-3000:]
    lines = _product_lines(stderr)
    assert len(lines) == 1 and "received SIGINT" in lines[0], lines


def _holding_signals(proc: subprocess.Popen[str]) -> bool:
    """Whether the process catches SIGTERM yet (Linux's mask of caught signals)."""
    status = Path(f"/proc/{proc.pid}/status").read_text()
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_before_the_run_s_modules_load_stops_it_with_exit_0(
        broker, topic_factory, tmp_path, signum) -> None:
    """systemd may stop a run that is still importing its modules: one line says so, it exits
    0 as any stopped run does, and it has written nothing."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", 0)])
    proc = _start(_config(tmp_path, broker, topic), tmp_path)
    stderr = _signalled(proc, lambda: _holding_signals(proc), "the console script to start",
                        signum, wait_s=30, timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    lines = _product_lines(stderr)
    assert lines == [f"compactor: received {signal.Signals(signum).name}: stopped before "
                     "anything started, nothing written"], lines
    assert not (tmp_path / "lake").exists()


def _asking_kafka(proc: subprocess.Popen[str]) -> bool:
    """Whether the process has started a Kafka client (librdkafka names its threads rdk:*)."""
    tasks = Path(f"/proc/{proc.pid}/task")
    return any((task / "comm").read_text().startswith("rdk:") for task in tasks.iterdir())


def test_a_signal_while_kafka_does_not_answer_stops_the_run_at_once(tmp_path) -> None:
    """A run starting against a cluster that does not answer (here for up to five minutes)
    still stops at once on SIGTERM, with exit 0, not when the request times out."""
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": f"127.0.0.1:{free_port()}", "topics": "t",
        "lake.path": str(tmp_path / "lake"), "kafka.socket.timeout.ms": "300000"})
    proc = _start(conf, tmp_path)
    stderr = _signalled(proc, lambda: _asking_kafka(proc), "the run to ask Kafka",
                        signal.SIGTERM, wait_s=60, timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    assert _product_lines(stderr) == ["compactor: received SIGTERM: stopped before anything "
                                      "started, nothing written"]


def test_ctrl_c_while_another_verb_starts_is_an_interruption(tmp_path) -> None:
    """Only ``run`` stops gracefully; any other verb stopped while it starts exits 130."""
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "localhost:1", "topics": "t", "lake.path": str(tmp_path)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "compactor.cli", "describe-config", "--config", str(conf)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    stderr = _signalled(proc, lambda: _holding_signals(proc), "the console script to start",
                        signal.SIGINT, wait_s=30, timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    assert stderr.strip().splitlines() == ["compactor: interrupted"]
