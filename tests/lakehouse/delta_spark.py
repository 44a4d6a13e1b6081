"""delta-spark for the tests: the lakehouse around the mirror, read and followed by Spark.

No delta-spark release matches the project's pyspark (4.3): delta-spark 4.4 is built for Spark
4.2, and on 4.3 it fails at its first query (a Spark internal it calls changed). So the tests
run delta-spark where its users run it, in a Python environment of its own with the pyspark
it declares, made once per machine in the test cache (``$KAFKA_LAKE_COMPACTOR_CACHE``, default
``~/.cache/kafka-lake-compactor``) with pip from PyPI; its jars come from Maven Central through
Spark's own ``spark.jars.packages`` into an Ivy cache beside it. :func:`run_job` runs a job
of ``spark_job.py`` there and returns its result. Each pytest worker keeps one served session
(``spark_job.py --serve``) for its jobs, one at a time; a ``catalog`` job, which needs a
session of its own, runs in a process of its own.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from tests.cache import cache_dir, made_once

DELTA_SPARK = "4.4.0"
JOB = Path(__file__).with_name("spark_job.py")


def python() -> Path:
    """The Python of the delta-spark environment, made on first use."""
    home = cache_dir() / f"delta-spark-{DELTA_SPARK}"
    exe = home / "venv" / "bin" / "python"
    made_once(home, lambda: _make(home, exe))
    return exe


def _make(home: Path, exe: Path) -> None:
    shutil.rmtree(home / "venv", ignore_errors=True)  # a half-made one, without the mark
    home.mkdir(parents=True, exist_ok=True)
    for step in ([sys.executable, "-m", "venv", str(home / "venv")],
                 [str(exe), "-m", "pip", "install", "-q", f"delta-spark=={DELTA_SPARK}"]):
        done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"making the delta-spark environment failed ({' '.join(step)}):"
                               f"\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    (home / ".complete").write_text(DELTA_SPARK)


def _env() -> dict[str, str]:
    env = {**os.environ, "DELTA_SPARK_IVY": str(cache_dir() / "ivy")}
    for inherited in ("PYSPARK_PYTHON", "SPARK_HOME", "PYTHONPATH"):  # the project's Spark
        env.pop(inherited, None)
    return env


class _Server:
    """``spark_job.py --serve``: one session answering one job at a time."""

    def __init__(self) -> None:
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (the process keeps it)
            prefix="delta-spark-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([str(python()), str(JOB), "--serve"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=_env())
        self.lines: queue.Queue[str] = queue.Queue()
        self.busy = False
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            if line.startswith(("RESULT ", "FAILED ")):
                self.lines.put(line)
        self.lines.put("")  # the process ended

    def send(self, job: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        self.busy = True

    def answer(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise AssertionError(f"the delta-spark job gave no answer in {timeout}s:\n"
                                 f"{self._log_tail()}") from None
        self.busy = False
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT "):]))
        if line.startswith("FAILED "):
            raise AssertionError(f"the delta-spark job failed:\n{json.loads(line[7:])}")
        raise AssertionError(f"the delta-spark session exited ({self.proc.wait()}):\n"
                             f"{self._log_tail()}")

    def _log_tail(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the session stops once its job is done
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)


_served: list[_Server] = []  # this worker's session, started by its first job


def _server() -> _Server:
    if _served and (_served[0].busy or _served[0].proc.poll() is not None):
        _served.pop().stop()  # a job nobody collected (its test failed), or a dead session
    if not _served:
        _served.append(_Server())
        atexit.register(_served[0].stop)
    return _served[0]


class Job:
    """A job under way: in the served session, or (``proc``) in a process of its own."""

    def __init__(self, server: _Server | None = None,
                 proc: subprocess.Popen[str] | None = None) -> None:
        self._server = server
        self._proc = proc

    def poll(self) -> int | None:
        """None while the job can still answer; the exit code of its process once it ended."""
        if self._proc is not None:
            return self._proc.poll()
        assert self._server is not None
        return self._server.proc.poll()


def start_job(job: dict[str, Any]) -> Job:
    """Start a job of ``spark_job.py`` under delta-spark (:func:`job_result` waits for it)."""
    if "catalog" in job:  # session settings of its own (a Hive metastore)
        return Job(proc=subprocess.Popen([str(python()), str(JOB), json.dumps(job)],
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, env=_env()))
    server = _server()
    server.send(job)
    return Job(server=server)


def job_result(job: Job, timeout: float = 900) -> dict[str, Any]:
    """Wait for a job; its result."""
    if job._server is not None:
        return job._server.answer(timeout)
    assert job._proc is not None
    out, err = job._proc.communicate(timeout=timeout)
    if job._proc.returncode != 0:
        raise AssertionError(f"the delta-spark job failed:\n{err[-5000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_job(job: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Run a job of ``spark_job.py`` under delta-spark; its result."""
    return job_result(start_job(job), timeout)
