"""The Spark session the product builds: what its driver and Python workers run with."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from streaming.session import ARROW_POOL, DEFAULTS


def _backend(_: int) -> str:
    import pyarrow

    return str(pyarrow.default_memory_pool().backend_name)


def test_driver_and_workers_allocate_arrow_memory_from_the_sessions_pool(spark: Any) -> None:
    """The pool that hands freed pages back (see streaming.session), in every process."""
    assert pa.default_memory_pool().backend_name == DEFAULTS[ARROW_POOL]
    workers = spark.sparkContext.parallelize(range(4), 4).map(_backend).collect()
    assert workers == [DEFAULTS[ARROW_POOL]] * 4
