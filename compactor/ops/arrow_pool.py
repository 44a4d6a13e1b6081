"""Arrow's allocator for the command's own process, picked before pyarrow loads.

Arrow's C++ code (the Parquet reader and writer among it) allocates from a default pool that
Arrow picks from ``ARROW_DEFAULT_MEMORY_POOL`` once, when pyarrow loads; pyarrow's
``set_memory_pool``, which the Spark session calls for the configured pool
(``streaming.session.use_arrow_pool``), reaches only what Python code allocates. Without the
variable that default is mimalloc, which keeps pages a rewrite freed (bench/README.md,
"Why the code's settings"). The mirror's Python workers get the variable
from ``spark.executorEnv``; the command line sets it for its own process here, unless the
environment already names a pool. This module imports nothing that loads pyarrow.
"""

from __future__ import annotations

import sys
from collections.abc import MutableMapping

ARROW_POOL_ENV = "ARROW_DEFAULT_MEMORY_POOL"


def default_arrow_pool() -> str:
    """The pool the session's defaults name, without loading pyarrow to ask: jemalloc, which
    pyarrow's wheels carry except on Windows (there the system allocator)."""
    return "system" if sys.platform == "win32" else "jemalloc"


def pick_arrow_pool(environ: MutableMapping[str, str]) -> str:
    """Name the default pool for Arrow in ``environ`` unless it names one; the pool named."""
    return environ.setdefault(ARROW_POOL_ENV, default_arrow_pool())
