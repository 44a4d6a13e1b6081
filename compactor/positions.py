"""Every position the product keeps, and how each one moves.

Kafka's cleaner keeps one ``cleaner-offset-checkpoint`` file with one owner. Here each position
is a Delta *app transaction* (``txn`` action: an app id and a version) inside the table whose
work it measures, so it moves in the same atomic commit as that work and a crash can neither
lose nor repeat it. Each position is read back with ``DeltaTable.transaction_version``.

======================  =================================  ======================================
position                where it lives                     its version
======================  =================================  ======================================
``INGEST``              ``L/T/log`` and ``L/T/rejected``   last Kafka offset appended
``CLEANER``             ``L/T/log``                        first dirty offset (Kafka's checkpoint)
``REWRITE``             ``L/T/log``                        commits of the partition's cleaner
                                                           tasks so far (a fence)
``TABLE``               ``L/T/table``                      last log offset merged
``RETAINED``            ``L/T/table``                      the log start offset below which
                                                           rows were removed (retention)
``TYPED``               ``L/T/rejected``                   last log offset whose type changes
                                                           (typed formats) are reported
``LEDGER``              the erasure ledger table           last log offset whose tombstones
                                                           are recorded
``ERASE``               each downstream table              last log offset whose tombstones are
                                                           applied there
``PRUNED``              the erasure ledger                 last log offset whose finished
                                                           erasures the ledger's retention
                                                           removed
``PRUNED_LATE``         the erasure ledger                 erasures that missed their deadline
                                                           among those removed (a count, so
                                                           that missed deadlines stay counted)
``WRITER``              ``L/T/log``                        writer generation (fencing lease)
``UNCLEANABLE``         ``L/T/log``                        when a partition was marked
                                                           uncleanable (epoch ms)
``CLEANABLE``           ``L/T/log``                        when that mark was cleared (epoch ms)
``CAUGHT_UP``           ``L/T/log``                        epoch ms before which every record
                                                           the broker held is in the log, or
                                                           its erasures were reconciled
======================  =================================  ======================================

Spark's own position, the offsets of the mirror's micro-batches, lives in the query's
checkpoint directory (:func:`query_checkpoint`); the lake's ``INGEST`` versions decide what a
replayed micro-batch still has to write, so the two can never disagree about data.

The app ids are part of the lake's format: never rename them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from deltalake import DeltaTable, Transaction


@dataclass(frozen=True)
class Position:
    """One kind of position: an app-id template, where it lives and what its version means."""

    app_id: str  # may hold {partition} and {topic}
    lives_in: str
    version: str

    def id(self, partition: int | None = None, topic: str | None = None) -> str:
        """The app id of one instance (one partition, and one topic for downstream tables)."""
        return _app_id(self.app_id, partition, topic)

    def read(self, table: DeltaTable, partition: int | None = None,
             topic: str | None = None) -> int | None:
        """The committed version in ``table``'s snapshot; None before the first commit."""
        return table.transaction_version(self.id(partition, topic))

    def moved_to(self, version: int, partition: int | None = None, topic: str | None = None,
                 now_ms: int | None = None) -> Transaction:
        """The app transaction that moves this position, to ride in the work's own commit."""
        return Transaction(self.id(partition, topic), version, now_ms)


INGEST = Position("compactor-ingest-{partition}", "L/T/log and L/T/rejected",
                  "last Kafka offset appended")
CLEANER = Position("compactor-cleaner-{partition}", "L/T/log",
                   "first dirty offset: everything below it is cleaned")
REWRITE = Position("compactor-rewrite-{partition}", "L/T/log",
                   "commits of the partition's cleaner tasks so far: a fence, since a segment "
                   "rewrite moves no checkpoint")
TABLE = Position("compactor-table-{partition}", "L/T/table", "last log offset merged")
RETAINED = Position("compactor-retained-{partition}", "L/T/table",
                    "the log's start offset whose older rows the table no longer holds")
TYPED = Position("compactor-typed-{partition}", "L/T/rejected",
                 "last log offset whose records of an unmergeable schema are reported")
LEDGER = Position("compactor-ledger-{partition}", "the erasure ledger",
                  "last log offset whose tombstones are recorded")
PRUNED = Position("compactor-pruned-{partition}", "the erasure ledger",
                  "last log offset whose finished erasures the ledger's retention removed")
PRUNED_LATE = Position("compactor-pruned-late", "the erasure ledger",
                       "how many erasures the ledger's retention removed had missed their "
                       "deadline")
ERASE = Position("compactor-erase-{topic}-{partition}", "each downstream table",
                 "last log offset whose tombstones are applied")
WRITER = Position("compactor-writer", "L/T/log", "writer generation of the run that owns the log")
UNCLEANABLE = Position("compactor-uncleanable-{partition}", "L/T/log",
                       "epoch ms when cleaning the partition last failed")
CLEANABLE = Position("compactor-cleanable-{partition}", "L/T/log",
                     "epoch ms when that failure was cleared by a successful pass")

CAUGHT_UP = Position("compactor-caught-up", "L/T/log",
                     "epoch ms before which every record the broker held is in the log (or "
                     "the erasures among them were reconciled with the topic)")

ALL = (INGEST, CLEANER, REWRITE, TABLE, RETAINED, TYPED, LEDGER, PRUNED, PRUNED_LATE, ERASE, WRITER,
       UNCLEANABLE, CLEANABLE, CAUGHT_UP)


def query_checkpoint(checkpoint_path: str) -> str:
    """The mirror query's Spark checkpoint directory under ``checkpoint.path``."""
    return f"{checkpoint_path.rstrip('/')}/mirror"


@functools.lru_cache(maxsize=1 << 16)
def _app_id(template: str, partition: int | None, topic: str | None) -> str:
    # Looked up per partition at every view of a log: formatted once.
    return template.format(partition=partition, topic=topic)
