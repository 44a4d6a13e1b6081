"""The session's settings that are refused before Spark starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from streaming.exceptions import StreamingError
from streaming.session import (
    ARROW_POOL,
    DEFAULTS,
    build_session,
    driver_memory,
    heap_floor_mib,
    use_arrow_pool,
)


def test_an_unknown_arrow_pool_is_refused_by_name_before_spark_starts() -> None:
    before = pa.default_memory_pool().backend_name
    with pytest.raises(StreamingError) as err:
        build_session({ARROW_POOL: "tcmalloc"})
    assert "ARROW_DEFAULT_MEMORY_POOL='tcmalloc'" in str(err.value)
    assert "system" in str(err.value)  # what to use instead
    assert pa.default_memory_pool().backend_name == before


def test_the_default_pool_is_one_this_pyarrow_has() -> None:
    before = pa.default_memory_pool()
    environ: dict[str, str] = {}
    try:
        use_arrow_pool(DEFAULTS[ARROW_POOL], environ)
        assert pa.default_memory_pool().backend_name == DEFAULTS[ARROW_POOL]
        assert environ == {"ARROW_DEFAULT_MEMORY_POOL": DEFAULTS[ARROW_POOL]}
    finally:
        pa.set_memory_pool(before)


_PARQUET_WRITE = """
import sys
if sys.argv[1] == "late":
    import pyarrow  # a process that loaded Arrow before the command line's modules
import compactor.cli  # what the console script imports first
import logging, os
import pyarrow as pa, pyarrow.parquet as pq
from streaming.session import ARROW_POOL, DEFAULTS, use_arrow_pool
logging.basicConfig(level=logging.WARNING)
use_arrow_pool(DEFAULTS[ARROW_POOL], os.environ)
before = pa.mimalloc_memory_pool().total_bytes_allocated()
pq.write_table(pa.table({"key": [b"k%d" % i for i in range(200_000)]}), sys.argv[2])
print(DEFAULTS[ARROW_POOL], pa.mimalloc_memory_pool().total_bytes_allocated() - before)
"""


@pytest.mark.parametrize("when", ["cli", "late"])
def test_arrow_s_own_allocations_come_from_the_pool_too(tmp_path: Path, when: str) -> None:
    """The Parquet writer allocates from the pool Arrow picked when pyarrow loaded, not from
    the one set_memory_pool sets. In a process of its own, started as the console script
    starts (compactor.cli first), a Parquet write takes nothing from mimalloc, pyarrow's
    default; a process that had loaded pyarrow before is told how to start instead."""
    environ = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    done = subprocess.run([sys.executable, "-c", _PARQUET_WRITE, when, str(tmp_path / "f")],
                          capture_output=True, text=True, env=environ, timeout=120, check=True)
    pool, from_mimalloc = done.stdout.split()
    assert pool != "mimalloc"
    if when == "cli":
        assert int(from_mimalloc) == 0
        assert "allocates from" not in done.stderr
    else:
        assert int(from_mimalloc) > 1 << 20  # the writer's buffers: what the fix moves
        assert "Arrow's own code in this process allocates from mimalloc" in done.stderr
        assert f"ARROW_DEFAULT_MEMORY_POOL={pool} in its environment" in done.stderr


def test_a_jvm_option_is_added_only_when_the_jvm_starts_with_it() -> None:
    """The native-heap trim needs Java 17.0.9 or newer; an older JVM refuses the option and
    would not start, so the session probes the JVM Spark will launch first."""
    from streaming.session import NATIVE_TRIM, _jvm_accepts

    assert _jvm_accepts("-XX:G1HeapRegionSize=4m")
    assert not _jvm_accepts("-XX:TrimNativeHeapIntervalTypo=10000")
    assert _jvm_accepts(NATIVE_TRIM)  # this machine's Java 17 is 17.0.15


@pytest.mark.parametrize(("driver_memory", "floor"), [
    ("1g", 256), ("1G", 256), ("2048", 512), ("512m", 128), ("4gb", 1024), (" 8g ", 2048),
])
def test_the_driver_heap_floor_is_a_quarter_of_spark_driver_memory(driver_memory: str,
                                                                   floor: int) -> None:
    """Read as Spark reads spark.driver.memory: a whole number, MiB when it has no unit."""
    assert heap_floor_mib(driver_memory) == floor


@pytest.mark.parametrize("driver_memory", ["1.5g", "lots", "1024b", "3m", ""])
def test_no_floor_for_a_memory_spark_refuses_or_a_heap_too_small_to_need_one(
        driver_memory: str) -> None:
    """Spark's own error names a value it refuses; a floor under 1 MiB would mean nothing."""
    assert heap_floor_mib(driver_memory) is None


def test_the_floor_follows_the_heap_spark_submit_picks() -> None:
    """A floor above the heap stops the JVM from starting, so the floor reads the heap where
    spark-submit does: the conf first, then SPARK_DRIVER_MEMORY, then SPARK_MEM."""
    env = {"SPARK_DRIVER_MEMORY": "200m", "SPARK_MEM": "2g"}
    assert driver_memory({"spark.driver.memory": "4g"}, env) == "4g"
    assert driver_memory({}, env) == "200m"
    assert heap_floor_mib(driver_memory({}, env)) == 50
    assert driver_memory({}, {"SPARK_MEM": "2g"}) == "2g"
    assert driver_memory({}, {}) == "1g"
