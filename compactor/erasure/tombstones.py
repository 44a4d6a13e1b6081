"""Tombstone readers and the cleaner: no tombstone is cleaned away before it was carried.

The erasure ledger and every downstream table read the log's tombstones: the ledger records
each erasure and its deadline, a downstream table deletes the key's rows. The cleaner drops a
tombstone as soon as a later record of its key supersedes it (Kafka's rule), so a reader that
fell behind the cleaner would never see it: the erasure would go unrecorded, and the
downstream rows of a key that was erased and then written again would stay. Readers fall
behind when a run dies between its ingest commit and the readers' commits and the next pass
(of the restarted run, or of ``compactor clean``) comes before the next micro-batch, as the
fault suite found.

Protocol of a cleaning pass, per topic:

1. Under the commit lock (the mirror runs the readers under it once each micro-batch has
   returned, and before its next commit or MERGE of the topic), run the readers over
   everything the log has committed: downstream deletes, then the ledger's tombstones, then
   the ledger's done events of the downstream tables.
2. Take, per partition, the last offset every reader has read (the slowest reader's).
3. Plan the pass from a newer snapshot of the log with the first uncleanable offset at most
   the base of the first segment holding an offset past it (``cleanable_range``'s
   ``read_upto``): what the readers have not read is not cleaned.

A partition whose files a reader cannot read keeps its reader positions, so it is not cleaned
past them, and is marked uncleanable with the reader's error (``status`` shows it); a reader
that fails as a whole (its table is gone) stops cleaning of the topic this pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from compactor.config import CompactorConfig
from compactor.erasure.downstream import DownstreamEraser
from compactor.erasure.ledger import ErasureLedger
from compactor.lake.layout import topic_paths
from compactor.lake.log_follower import log_view
from compactor.lake.range_reader import WrittenTombstones


@dataclass(frozen=True)
class Carried:
    """What one catch-up of the readers did."""

    erased: dict[str, dict[int, int]]  # downstream table -> partition -> last offset applied
    read_upto: dict[int, int]  # partition -> last offset every reader has read
    failed: dict[int, str]  # partition -> why a reader could not read it (it waits)


@dataclass
class TombstoneReaders:
    """The ledger and the downstream tables of every topic, caught up together."""

    config: CompactorConfig
    ledger: ErasureLedger = field(init=False)
    eraser: DownstreamEraser = field(init=False)

    def __post_init__(self) -> None:
        self.ledger = ErasureLedger(self.config)
        self.eraser = DownstreamEraser(self.config)

    def catch_up(self, topic: str,
                 written: Mapping[int, WrittenTombstones] | None = None) -> Carried:
        """Bring every reader of ``topic`` up to what the log committed and return how far each
        partition was read (steps 1-2); the caller holds the commit lock. ``written``: per
        partition, the tombstones the micro-batch just committed wrote (its write tasks kept them),
        which a reader positioned at the batch's start takes instead of reading the files."""
        view = log_view(topic_paths(self.config.lake_path, topic).log,
                       self.config.storage)  # one version for every reader
        if view is None:
            return Carried({}, {}, {})
        erased = self.eraser.catch_up(topic, view, written)
        self.ledger.record_tombstones(topic, view, written)
        for name, upto in erased.items():
            self.ledger.record_done(topic, f"downstream:{name}", upto)
        read_upto = self.ledger.read_upto(topic)
        failed = {p: why for (t, p), why in self.ledger.failed.items() if t == topic}
        for name in (d.name for d in self.config.downstream if d.topic == topic):
            theirs = self.eraser.read_upto(name)
            read_upto = {p: min(o, theirs.get(p, -1)) for p, o in read_upto.items()}
            failed.update({p: why for (n, p), why in self.eraser.failed.items() if n == name})
        return Carried(erased, read_upto, failed)
