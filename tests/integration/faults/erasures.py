"""What the hunt learns of the erasures from the ledger, kept as it goes: the ledger prunes
finished erasures ``erasure.ledger.retention.ms`` after they finish, so each check takes in
what the ledger holds then."""

from __future__ import annotations

from dataclasses import dataclass, field

from deltalake import DeltaTable

from compactor.erasure.ledger import Erasure, ErasureLedger
from compactor.positions import LEDGER, PRUNED, PRUNED_LATE


@dataclass
class ErasureWatch:
    ledger: ErasureLedger
    topic: str
    partitions: int
    seen: dict[tuple[int, int], Erasure] = field(default_factory=dict)

    def look(self) -> None:
        """Take in every erasure the ledger holds now, with its latest state."""
        for e in self.ledger.erasures(self.topic):
            self.seen[(e.partition, e.offset)] = e

    def positions(self) -> tuple[dict[int, int], dict[int, int], int]:
        """(the ledger's scan position, its pruned position, per partition; how many pruned
        erasures had missed their deadline)."""
        table = DeltaTable(self.ledger.path(self.topic))
        scanned = {p: o for p in range(self.partitions)
                   if (o := LEDGER.read(table, p)) is not None}
        pruned = {p: o for p in range(self.partitions)
                  if (o := PRUNED.read(table, p)) is not None}
        return scanned, pruned, PRUNED_LATE.read(table) or 0

    def settled(self, upto: dict[int, int]) -> bool:
        """Every tombstone up to ``upto`` (per partition) recorded, and none pending."""
        self.look()
        scanned, _, _ = self.positions()
        return (all(scanned.get(p, -1) >= o for p, o in upto.items())
                and self.ledger.backlog(self.topic).pending == 0)
