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

import pyarrow as pa
from pyspark.sql import SparkSession

from compactor.ops.arrow_pool import ARROW_POOL_ENV
from streaming.exceptions import StreamingError
from streaming.kafka_source import KafkaDataSource

log = logging.getLogger(__name__)

# Arrow's allocator in the driver and the Python workers. pyarrow's default, mimalloc, kept
# pages that cleaning passes had freed however often it was asked to release them: one
# process cleaning a 6.4M-key log pass after pass held 255 -> 319 MB after its passes 2-11,
# with 0 bytes allocated in Arrow; with jemalloc 208 -> 236 MB (most of it delta-rs's code
# paged in), as fast as mimalloc for a Parquet rewrite (1.21 s against 1.21 s; the system
# allocator 1.40 s). Arrow's C++ code reads ARROW_DEFAULT_MEMORY_POOL when pyarrow loads:
# workers have it from spark.executorEnv, the command's process from compactor.cli
# (compactor.ops.arrow_pool); use_arrow_pool checks it.
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


# The driver JVM compiles with C1 only. It coordinates (plans, tracks offsets, hands Arrow
# batches between Python processes); the mirror's heavy work runs in Python workers and
# delta-rs. C2 kept compiling for the whole of a 30-minute soak: its code cache 23 -> 60 MB
# and metaspace 115 -> 122 MB, still rising at the end, where with C1 alone the code cache
# levelled at 36 MB by minute 19 and metaspace stayed at 107 MB (JVM resident memory 1.06x
# and 1.05x first tenth to last, against 1.07x-1.11x), and bench/run.py measured no loss.
# A user whose driver does heavy JVM work can set -XX:TieredStopAtLevel=4 in
# spark.driver.extraJavaOptions, which the JVM reads after these.
DRIVER_JIT = "-XX:TieredStopAtLevel=1"

# Small, predictable defaults for one machine; every key can be overridden with spark.*.
DEFAULTS = {
    "spark.master": "local[*]",
    "spark.app.name": "kafka-lake-compactor",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.python.worker.reuse": "true",
    # A query that runs for months makes one SQL execution, job and stage per micro-batch;
    # the UI keeps 1,000 of each by default, and its listener's work grows with them.
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
    ARROW_POOL: _default_pool(),
    # Spark serializes every task's result into a fresh 1 MiB buffer and every broadcast (each
    # stage's task binary, several a micro-batch) into blocks of spark.broadcast.blockSize, 4
    # MiB. G1 gives a heap under 2 GB 1 MiB regions and allocates any object of half a region
    # or more as "humongous", outside the young generation: in the soak 13 MiB a second of
    # them started three in five of the driver JVM's collections and moved its heap sizing.
    # 4 MiB regions and 1 MiB blocks make them ordinary short-lived objects. Spark's
    # defaultJavaOptions come before a user's extraJavaOptions, which keep working.
    "spark.driver.defaultJavaOptions": f"-XX:G1HeapRegionSize=4m {DRIVER_JIT}",
    "spark.executor.defaultJavaOptions": "-XX:G1HeapRegionSize=4m",
    "spark.broadcast.blockSize": "1m",
    # Workers on other machines import the product, never a folder of the job's directory.
    "spark.executorEnv.PYTHONSAFEPATH": "1",
}

# glibc's malloc keeps what the JVM frees natively (the JIT compiler's arenas, NIO and Spark's
# off-heap buffers) in its per-thread arenas rather than giving it back: in a 30-minute soak
# the driver JVM's resident memory rose by ~50 MB more than the JVM had committed, and
# `jcmd <pid> System.trim_native_heap` at minute 25 gave back 50 MB (536 -> 487 MB). The JVM
# can trim on its own, from a thread of its own, since 17.0.9 (JDK-8293114); on an older JVM,
# which refuses the option, the driver starts without it.
NATIVE_TRIM = "-XX:TrimNativeHeapInterval=10000"
DRIVER_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"

# G1 starts the driver's heap at 1/64 of the machine's memory (388 MB here), shrinks it a second
# later to 70% free over what is live (136 MB), then grows it again in a step whenever a burst
# of collections passes its pause-time threshold: every soak whose G1 log we kept ran at 136 MB
# committed until minute 16-19 and at 164 MB for the rest of the run, a step of resident memory
# half an hour into a service that runs for months. A floor of a quarter of the driver's heap
# (256 MiB at Spark's default spark.driver.memory of 1g) sits above where the heap settled, so
# the young generation is sized once, at the start. Kafka starts its brokers at their full heap
# for the same reason; a quarter keeps a small driver small.
DRIVER_MEMORY = "spark.driver.memory"
SAFE_PATH = "PYTHONSAFEPATH"
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
    previous = os.environ.get(SAFE_PATH)
    os.environ[SAFE_PATH] = "1"  # the gateway copies the environment at launch
    try:
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            spark_conf, popen_kwargs={"start_new_session": True})
    finally:
        if previous is None:
            del os.environ[SAFE_PATH]
        else:
            os.environ[SAFE_PATH] = previous
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
