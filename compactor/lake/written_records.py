"""The records a micro-batch just put in the log, kept in the driver for the next MERGE.

The latest-value table's catch-up reads each partition's new records since its last MERGE
(:mod:`compactor.lake.latest_table`, step 2). With many partitions and small batches those
are many one-record files, and a Parquet file's footer costs more to read than its records.
A write task therefore returns the records it wrote to the log with its results, one
table for its ranges of at most :data:`RANGE_BYTES` each (up to :data:`TASK_BYTES` a task:
a busy topic's records are not all copied to the driver), and the driver keeps them,
after their commit only, until the table has merged them (:class:`WrittenLog`, at most
:data:`KEPT_BYTES` in all). A catch-up takes a partition's range from here when the kept
ranges cover all of it, and reads the files otherwise: after a restart, past the caps, or
when a batch's records of the partition were not kept.

The kept records are exactly the log's: the task hands over the rows it gave the segment
files (offsets past the committed one, null keys of a compacted topic left out), and
:meth:`WrittenLog.records` demands a contiguous chain of committed ranges that ends at the
log's committed offset.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

RANGE_BYTES = 1024 * 1024  # a range's records above this are read from its files instead
TASK_BYTES = 4 * 1024 * 1024  # what one write task sends at most, its first ranges' records
KEPT_BYTES = 64 * 1024 * 1024  # the driver's kept records, all topics


@dataclass(frozen=True)
class WrittenRecords:
    """The records a write task put in the log for some of its ranges, as the log holds them
    (Spark's Kafka schema, ``topic`` and ``partition`` included): range by range, in
    ``ranges`` order, each range's records in offset order. One table for all of a task's
    ranges: sent and kept per range, they cost more than the files they spare reading."""

    rows: pa.Table
    # (topic, partition, after, upto, rows): the records with after < offset <= upto
    ranges: tuple[tuple[str, int, int, int, int], ...]

    def parts(self) -> Iterator[tuple[str, int, int, int, pa.Table]]:
        """(topic, partition, after, upto, its records) of each range."""
        at = 0
        for topic, partition, after, upto, count in self.ranges:
            yield topic, partition, after, upto, self.rows.slice(at, count)
            at += count

    def __reduce__(self) -> tuple[object, tuple[pa.Buffer, tuple[tuple[str, int, int, int,
                                                                     int], ...]]]:
        # Sent from each write task to the driver: Arrow's stream format is several times
        # cheaper to write and read than a table's pickle, and holds a slice's rows only.
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, self.rows.schema) as writer:
            writer.write_table(self.rows)
        return _unpickle, (sink.getvalue(), self.ranges)


def _unpickle(stream: pa.Buffer,
              ranges: tuple[tuple[str, int, int, int, int], ...]) -> WrittenRecords:
    return WrittenRecords(pa.ipc.open_stream(stream).read_all(), ranges)


class _Kept(NamedTuple):
    after: int
    upto: int
    rows: pa.Table
    size: int  # bytes, the range's share of its task's table


class WrittenLog:
    """Per topic and partition, the chain of committed ranges whose records are kept."""

    def __init__(self, kept_bytes: int = KEPT_BYTES) -> None:
        self._kept_bytes = kept_bytes
        self._lock = threading.Lock()  # batches add, the service loop's MERGEs take
        self._chains: dict[str, dict[int, list[_Kept]]] = {}
        self._bytes = 0

    def add(self, written: Iterable[WrittenRecords]) -> None:
        """Keep ranges whose commit succeeded; a topic whose ranges no longer fit is dropped
        (its next catch-up reads files, and keeping starts again after it)."""
        with self._lock:
            for bundle in written:
                per_row = bundle.rows.nbytes / max(1, bundle.rows.num_rows)
                for topic, partition, after, upto, rows in bundle.parts():
                    size = int(per_row * rows.num_rows)
                    if self._bytes + size > self._kept_bytes:
                        self._drop(topic)
                        continue
                    chain = self._chains.setdefault(topic, {}).setdefault(partition, [])
                    if chain and chain[-1].upto != after:
                        self._bytes -= sum(k.size for k in chain)
                        chain.clear()  # not contiguous: what came before cannot be used
                    chain.append(_Kept(after, upto, rows, size))
                    self._bytes += size

    def records(self, topic: str, partition: int, after: int, upto: int) -> pa.Table | None:
        """The records with ``after < offset <= upto`` when the kept chain covers them all;
        None otherwise (read them from the log)."""
        with self._lock:
            chain = list(self._chains.get(topic, {}).get(partition, []))
        if not chain or chain[0].after > after or chain[-1].upto != upto:
            return None
        used = [k for k in chain if k.upto > after]
        if not used:
            return chain[-1].rows.slice(0, 0)
        rows = pa.concat_tables([k.rows for k in used]) if len(used) > 1 else used[0].rows
        if used[0].after >= after:
            return rows  # a range starts where the table stands: nothing to leave out
        return rows.filter(pc.greater(rows.column("offset"), after))

    def merged(self, topic: str, upto: Mapping[int, int]) -> None:
        """The table merged each partition up to ``upto``: ranges ending there go."""
        with self._lock:
            chains = self._chains.get(topic, {})
            for partition, offset in upto.items():
                chain = chains.get(partition, [])
                while chain and chain[0].upto <= offset:
                    self._bytes -= chain.pop(0).size

    def kept_bytes(self) -> int:
        with self._lock:
            return self._bytes

    def _drop(self, topic: str) -> None:
        for chain in self._chains.pop(topic, {}).values():
            self._bytes -= sum(k.size for k in chain)
