"""The Spark session the product builds: what its driver and Python workers run with."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

from streaming.session import (
    ARROW_POOL,
    CHECKPOINT_FILES,
    DEFAULTS,
    DRIVER_MEMORY,
    SOURCE_LOOKUP,
    driver_memory,
    heap_floor_mib,
)


def _backend(_: int) -> str:
    import pyarrow

    return str(pyarrow.default_memory_pool().backend_name)


def _vm_options(spark: Any) -> Any:
    """The driver JVM's HotSpotDiagnosticMXBean: the options it runs with."""
    jvm = spark.sparkContext._jvm
    return jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean"))


def test_driver_and_workers_allocate_arrow_memory_from_the_sessions_pool(spark: Any) -> None:
    """The pool that hands freed pages back (see streaming.session), in every process."""
    assert pa.default_memory_pool().backend_name == DEFAULTS[ARROW_POOL]
    workers = spark.sparkContext.parallelize(range(4), 4).map(_backend).collect()
    assert workers == [DEFAULTS[ARROW_POOL]] * 4


def test_sparks_per_task_buffers_are_ordinary_objects_in_the_driver_jvm(spark: Any) -> None:
    """Each task's result is serialized into a 1 MiB buffer and each broadcast into blocks of
    ``spark.broadcast.blockSize``; G1 allocates an object of half a region or more outside the
    young generation. The session's JVM runs with regions that keep both inside it."""
    diagnostics = _vm_options(spark)
    assert diagnostics.getVMOption("UseG1GC").getValue() == "true"
    region = int(diagnostics.getVMOption("G1HeapRegionSize").getValue())
    block = spark.sparkContext._jsc.sc().conf().getSizeAsBytes("spark.broadcast.blockSize")
    header = 16  # a byte array's
    assert 1024 * 1024 + header < region // 2, region
    assert block + header < region // 2, (block, region)


def test_the_driver_jvm_gives_back_the_native_memory_it_frees(spark: Any) -> None:
    """A mirror runs for months: the driver JVM trims glibc's heap (what the JIT and
    Spark's native buffers free). The JVM here is 17.0.9 or newer, which knows the option."""
    diagnostics = _vm_options(spark)
    assert int(diagnostics.getVMOption("TrimNativeHeapInterval").getValue()) == 10_000


def test_the_driver_jvm_compiles_with_c1_only(spark: Any) -> None:
    """C2's code cache and metaspace kept growing for a whole soak; the driver JVM, which only
    coordinates, stops at C1 (level 1) unless the user asks for more."""
    diagnostics = _vm_options(spark)
    assert int(diagnostics.getVMOption("TieredStopAtLevel").getValue()) == 1  # HotSpot's is 4


def test_the_driver_heap_is_not_shrunk_below_its_floor(spark: Any) -> None:
    """G1 shrinks a heap with little live data and grows it again in steps under bursts of
    collections; the session gives the driver a floor (a quarter of its heap) so the heap is
    sized once, at the start. A full collection, which shrinks the heap as far as it may, leaves
    the floor committed."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.sc().conf()
    set_memory = {DRIVER_MEMORY: conf.get(DRIVER_MEMORY)} if conf.contains(DRIVER_MEMORY) else {}
    floor = heap_floor_mib(driver_memory(set_memory, os.environ))
    assert floor is not None
    jvm.java.lang.System.gc()
    heap = jvm.java.lang.management.ManagementFactory.getMemoryMXBean().getHeapMemoryUsage()
    assert heap.getCommitted() >= floor * 1024 * 1024, (heap.getCommitted(), floor)


def test_the_driver_jvm_starts_no_search_for_other_python_data_sources(spark: Any) -> None:
    """At the first Python data source, Spark runs a Python process that imports every
    pyspark_* module it finds when the command its JVM's PYSPARK_DRIVER_PYTHON names exists:
    a start-up step of the product's only for sources it does not use. The session's JVM
    names no command there; this process's own environment is left as it was."""
    named = spark.sparkContext._jvm.java.lang.System.getenv(SOURCE_LOOKUP)
    assert named and shutil.which(named) is None, named
    assert os.environ.get(SOURCE_LOOKUP) != named


def _daemon(_: int) -> tuple[str, bool]:
    import sys

    main = sys.modules["__main__"].__spec__
    daemon = sys.modules.get("pyspark.daemon")
    hooked = daemon is not None and hasattr(daemon.worker, "__wrapped__")
    return (main.name if main else "", hooked)


def test_tasks_run_in_workers_of_the_daemon_without_tcp_delays(spark: Any) -> None:
    """Every task's worker is forked from streaming.worker_daemon, with its hook in place."""
    workers = spark.sparkContext.parallelize(range(4), 4).map(_daemon).collect()
    assert workers == [("streaming.worker_daemon", True)] * 4


def test_query_logs_are_written_through_the_sessions_checkpoint_manager(spark: Any,
                                                                         tmp_path: Path) -> None:
    """Spark makes each query's offset and commit logs with the manager the session names,
    which this Spark has and which writes a log file whole, under its final name."""
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    log = jvm.org.apache.hadoop.fs.Path(tmp_path.as_uri())
    manager = jvm.org.apache.spark.sql.execution.streaming.checkpointing \
        .CheckpointFileManager.create(log, conf)
    assert manager.getClass().getName() == DEFAULTS[CHECKPOINT_FILES]
    written = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(log, "0"), False)
    written.write(bytearray(b"v1\n{}"))
    written.close()
    assert (tmp_path / "0").read_bytes() == b"v1\n{}"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
