"""delta-spark for the tests: the lakehouse around the mirror, read and followed by Spark.

No delta-spark release matches the project's pyspark (4.3): delta-spark 4.4 is built for Spark
4.2, and on 4.3 it fails at its first query (a Spark internal it calls changed). So the tests
run delta-spark where its users run it, in a Python environment of its own with the pyspark
it declares, made once per machine in the test cache (``$KAFKA_LAKE_COMPACTOR_CACHE``, default
``~/.cache/kafka-lake-compactor``) with pip from PyPI; its jars come from Maven Central through
Spark's own ``spark.jars.packages`` into an Ivy cache beside it. :func:`run_job` runs
``spark_job.py`` there and returns what it printed as JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def start_job(job: dict[str, Any], script: Path = JOB) -> subprocess.Popen[str]:
    """Start ``script`` (``spark_job.py``) with ``job`` under delta-spark (:func:`job_result`
    ends it)."""
    env = {**os.environ, "DELTA_SPARK_IVY": str(cache_dir() / "ivy")}
    for inherited in ("PYSPARK_PYTHON", "SPARK_HOME", "PYTHONPATH"):  # the project's Spark
        env.pop(inherited, None)
    return subprocess.Popen([str(python()), str(script), json.dumps(job)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def job_result(proc: subprocess.Popen[str], timeout: float = 900) -> dict[str, Any]:
    """Wait for a job; its JSON result."""
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"the delta-spark job failed:\n{err[-5000:]}")
    return dict(json.loads(out.strip().splitlines()[-1]))


def run_job(job: dict[str, Any], timeout: float = 900) -> dict[str, Any]:
    """Run ``spark_job.py`` with ``job`` under delta-spark; its JSON result."""
    return job_result(start_job(job), timeout)
