"""Every position the product keeps, in one place: see :mod:`checkpoints.positions`.

The lowest layer: ``compactor`` and ``streaming`` use it; it uses only ``deltalake``.
"""

from checkpoints.positions import (
    ALL,
    CLEANABLE,
    CLEANER,
    ERASE,
    INGEST,
    LEDGER,
    PRUNED,
    PRUNED_LATE,
    REWRITE,
    TABLE,
    TYPED,
    UNCLEANABLE,
    WRITER,
    Position,
    query_checkpoint,
)

__all__ = [
    "ALL", "CLEANABLE", "CLEANER", "ERASE", "INGEST", "LEDGER", "PRUNED", "PRUNED_LATE",
    "REWRITE", "TABLE", "TYPED", "UNCLEANABLE", "WRITER", "Position", "query_checkpoint",
]
