"""The Spark session the product runs on, with the Kafka data source registered."""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession

from compactor.ops.arrow_pool import ARROW_POOL_ENV
from streaming.exceptions import StreamingError
from streaming.kafka_source import KafkaDataSource

log = logging.getLogger(__name__)

# Arrow's allocator in the driver and the workers: jemalloc gives freed pages back, mimalloc
# kept them (bench/README.md, "Why the code's settings"). Arrow's C++ code reads
# ARROW_DEFAULT_MEMORY_POOL when pyarrow loads: workers have it from spark.executorEnv, the
# command's process from compactor.ops.arrow_pool; use_arrow_pool checks it.
ARROW_POOL = "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL"
_POOLS = {"jemalloc": pa.jemalloc_memory_pool, "mimalloc": pa.mimalloc_memory_pool,
          "system": pa.system_memory_pool}


def _available_pools() -> list[str]:
    names = []
    for name, pool in _POOLS.items():
        try:
            pool()
        except NotImplementedError:  # a pyarrow built without it (jemalloc: Windows wheels)
            continue
        names.append(name)
    return names


def _default_pool() -> str:
    return "jemalloc" if "jemalloc" in _available_pools() else "system"


# The driver JVM only coordinates, and C2's code cache kept growing in a long run: C1 only
# (bench/README.md). A driver doing heavy JVM work can set -XX:TieredStopAtLevel=4 in
# spark.driver.extraJavaOptions, which the JVM reads after these.
DRIVER_JIT = "-XX:TieredStopAtLevel=1"

CHECKPOINT_FILES = "spark.sql.streaming.checkpointFileManagerClass"

# Small, predictable defaults for one machine; every key can be overridden with spark.*.
DEFAULTS = {
    "spark.master": "local[*]",
    "spark.app.name": "kafka-lake-compactor",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.python.worker.reuse": "true",
    # A short task must not wait on TCP delays between the JVM and its worker (worker_daemon).
    "spark.python.daemon.module": "streaming.worker_daemon",
    # Hadoop FileContext's rename starts a readlink process per file it checks (bench/README.md).
    CHECKPOINT_FILES: "org.apache.spark.sql.execution.streaming.checkpointing."
                      "FileSystemBasedCheckpointFileManager",
    # A query that runs for months makes one SQL execution, job and stage per micro-batch;
    # the UI keeps 1,000 of each by default, and its listener's work grows with them.
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    ARROW_POOL: _default_pool(),
    # Task results (1 MiB buffers) and broadcast blocks stay below half a G1 region, so G1
    # does not allocate them as humongous objects (bench/README.md). Spark's
    # defaultJavaOptions come before a user's extraJavaOptions, which keep working.
    "spark.driver.defaultJavaOptions": f"-XX:G1HeapRegionSize=4m {DRIVER_JIT}",
    "spark.executor.defaultJavaOptions": "-XX:G1HeapRegionSize=4m",
    "spark.broadcast.blockSize": "1m",
    # Workers on other machines import the product, never a folder of the job's directory.
    "spark.executorEnv.PYTHONSAFEPATH": "1",
}

# glibc keeps what the JVM frees natively unless it is trimmed (bench/README.md); the JVM
# trims on its own since 17.0.9 (JDK-8293114), and an older JVM starts without the option.
NATIVE_TRIM = "-XX:TrimNativeHeapInterval=10000"
DRIVER_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"

# A heap floor of a quarter of spark.driver.memory: G1 otherwise shrinks the heap at start and
# grows it in steps later, a step of resident memory into a run of months (bench/README.md).
DRIVER_MEMORY = "spark.driver.memory"
SAFE_PATH = "PYTHONSAFEPATH"
# Spark looks for pyspark_* modules to register as data sources at the first Python data
# source, in a Python process of its own, when the command PYSPARK_DRIVER_PYTHON names (in
# the JVM's environment) exists; the product uses only its own source, so it names none.
SOURCE_LOOKUP = "PYSPARK_DRIVER_PYTHON"
NO_SOURCE_LOOKUP = "kafka-lake-compactor-looks-up-no-python-data-sources"
SPARK_DEFAULT_DRIVER_MEMORY = "1g"
_MIB_PER_UNIT = {"": 1.0, "b": 1 / 1024 ** 2, "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1,
                 "g": 1024, "gb": 1024, "t": 1024 ** 2, "tb": 1024 ** 2, "p": 1024 ** 3,
                 "pb": 1024 ** 3}


def build_session(spark_conf: Mapping[str, str] | None = None) -> SparkSession:
    """Start (or join) the Spark session; Python workers run this very interpreter.

    Workers must import this package and the same pyarrow as the driver, so they run
    ``sys.executable`` unless ``spark.pyspark.python`` names another interpreter. PySpark's
    Python side launches workers from the PYSPARK_PYTHON environment variable alone (it
    ignores the conf), so this is the one place the product sets it; the user never has to.
    """
    if shutil.which("java") is None:
        raise StreamingError(
            "Java was not found on PATH: Spark needs a Java 17 runtime "
            "(for example 'apt-get install openjdk-17-jre-headless')"
        )
    conf = {
        **DEFAULTS,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **(spark_conf or {}),
    }
    if DRIVER_JAVA_OPTIONS not in (spark_conf or {}):
        conf[DRIVER_JAVA_OPTIONS] = _driver_java_options(
            conf[DRIVER_JAVA_OPTIONS], driver_memory(conf, os.environ))
    os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    use_arrow_pool(conf[ARROW_POOL], os.environ)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = _off_main_thread(lambda: _start(conf, builder))
        # Active in this thread too (the JVM keeps it per thread): getActiveSession finds it.
        jvm: Any = spark._jvm
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    except Exception as exc:
        raise StreamingError(f"Spark did not start: {exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)
    return spark


def _start(conf: Mapping[str, str], builder: SparkSession.Builder) -> SparkSession:
    _launch_jvm(conf)
    return builder.getOrCreate()


def _off_main_thread(start: Callable[[], SparkSession]) -> SparkSession:
    """Run ``start`` in a thread of its own and wait for it.

    A SparkContext made on the main thread replaces the SIGINT handler with one that raises
    KeyboardInterrupt wherever the main thread is (inside a Py4J call, too); made elsewhere it
    leaves the caller's handler (the service's graceful stop) in place, and signals that
    arrive meanwhile reach that handler.
    """
    result: list[SparkSession] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(start())
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="spark-start", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)  # short waits: the main thread runs signal handlers between them
    if failure:
        raise failure[0]
    return result[0]


def _launch_jvm(conf: Mapping[str, str]) -> None:
    """Start the driver JVM for ``conf`` unless this process has one, so that:

    - its Python workers (forked by the JVM, ``python -m ...``) get ``PYTHONSAFEPATH=1``:
      Python then leaves the working directory off ``sys.path``, and a user's ``./checkpoints``
      or ``./streaming`` folder cannot shadow the product's modules;
    - it skips Spark's search for other Python data sources (``SOURCE_LOOKUP``), a Python
      process started at the first query;
    - it runs in a session of its own: a signal to the command's process group (systemd's
      SIGTERM, a terminal's Ctrl-C) reaches the driver, which stops after the current commit,
      and not the JVM under it. The JVM still exits when the driver does (its stdin closes).
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        spark_conf.set(key, value)
    # The gateway copies this process's environment at launch.
    jvm_env = {SAFE_PATH: "1", SOURCE_LOOKUP: NO_SOURCE_LOOKUP}
    previous = {name: os.environ.get(name) for name in jvm_env}
    os.environ.update(jvm_env)
    try:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            spark_conf, popen_kwargs={"start_new_session": True})
    finally:
        for name, old in previous.items():
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old
    SparkContext._ensure_initialized(gateway=gateway)


def _driver_java_options(options: str, driver_memory: str) -> str:
    """``options`` plus the heap floor and, where the JVM has it, the native trim (above)."""
    floor = heap_floor_mib(driver_memory)
    if floor is not None:
        options = f"{options} -Xms{floor}m"
    if _jvm_accepts(NATIVE_TRIM):
        options = f"{options} {NATIVE_TRIM}"
    return options


def driver_memory(conf: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """The driver's heap as ``spark-submit`` picks it: the conf, then the SPARK_DRIVER_MEMORY
    and SPARK_MEM environment variables, then Spark's default; a floor above it would stop
    the JVM from starting."""
    for value in (conf.get(DRIVER_MEMORY), environ.get("SPARK_DRIVER_MEMORY"),
                  environ.get("SPARK_MEM")):
        if value:
            return value
    return SPARK_DEFAULT_DRIVER_MEMORY


def heap_floor_mib(driver_memory: str) -> int | None:
    """A quarter of ``spark.driver.memory`` in MiB, read as Spark reads it (a whole number, in
    MiB unless suffixed b, k(b), m(b), g(b), t(b) or p(b)); None for a value Spark will refuse
    itself, so that its own error names it, or a heap too small to need a floor."""
    match = re.fullmatch(r"(\d+)([a-z]*)", driver_memory.strip().lower())
    if match is None or match.group(2) not in _MIB_PER_UNIT:
        return None
    floor = int(int(match.group(1)) * _MIB_PER_UNIT[match.group(2)] // 4)
    return floor or None


@functools.cache
def _jvm_accepts(option: str) -> bool:
    """Whether the JVM Spark will launch (``$JAVA_HOME/bin/java``, else ``java`` on PATH, as
    ``spark-submit`` chooses) starts with ``option``."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java is None:
        return False
    try:
        probe = subprocess.run([java, option, "-version"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def use_arrow_pool(name: str, environ: MutableMapping[str, str]) -> None:
    """Allocate this process's Arrow memory from pool ``name`` (see ARROW_POOL).

    ``set_memory_pool`` reaches what Python code allocates; Arrow's C++ code (the Parquet
    reader and writer) allocates from the pool Arrow picked when pyarrow loaded
    (:mod:`compactor.ops.arrow_pool`). Where that is another pool (a process that loaded
    pyarrow before the command line could name one), a warning says how to start it. The
    variable is set for the processes this one starts.
    """
    try:
        pool = _POOLS[name]()
    except (KeyError, NotImplementedError) as exc:
        raise StreamingError(
            f"{ARROW_POOL}={name!r}: not an Arrow memory pool this pyarrow has; use one of "
            f"{', '.join(_available_pools())}"
        ) from exc
    # Arrow's own pool, or the one an earlier call here set (tests start many sessions)
    current = pa.default_memory_pool().backend_name
    if current != name:
        log.warning(
            "Arrow's own code in this process allocates from %s (picked when pyarrow loaded), "
            "so %s=%s reaches only what Python code allocates; start the process with %s=%s "
            "in its environment to use %s throughout",
            current, ARROW_POOL, name, ARROW_POOL_ENV, name, name)
    environ[ARROW_POOL_ENV] = name
    pa.set_memory_pool(pool)
