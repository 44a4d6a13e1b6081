"""A pure-Python reference model of Kafka log compaction, the oracle of the property tests.

It holds every partition's records as plain objects and applies Kafka's cleaning rule with
nothing clever: a dict for the offset map, a loop for the rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Rec:
    offset: int
    key: bytes
    value: bytes | None
    timestamp_ms: int
    horizon_ms: int | None = None


@dataclass
class ReferenceLog:
    delete_retention_ms: int
    map_capacity: int
    records: dict[int, list[Rec]] = field(default_factory=dict)
    checkpoints: dict[int, int] = field(default_factory=dict)

    def append(self, partition: int, recs: list[Rec]) -> None:
        self.records.setdefault(partition, []).extend(recs)

    def clean(self, partition: int, first_dirty: int, first_uncleanable: int, now_ms: int) -> int:
        """One pass over [first_dirty, first_uncleanable); returns the new checkpoint."""
        offsets: dict[bytes, int] = {}
        end = first_uncleanable
        for r in self.records.get(partition, []):
            if not first_dirty <= r.offset < first_uncleanable:
                continue
            if r.key not in offsets and len(offsets) >= self.map_capacity:
                end = r.offset  # the map is full: the pass ends before the key that did not fit
                break
            offsets[r.key] = r.offset
        kept = []
        for r in self.records.get(partition, []):
            latest = r.key not in offsets or r.offset >= offsets[r.key]
            expired = r.value is None and r.horizon_ms is not None and r.horizon_ms <= now_ms
            if not latest or expired:
                continue
            if r.value is None and r.horizon_ms is None and r.offset < end:
                r.horizon_ms = now_ms + self.delete_retention_ms
            kept.append(r)
        self.records[partition] = kept
        self.checkpoints[partition] = max(end, first_dirty)
        return self.checkpoints[partition]

    def rows(self) -> list[tuple[int, int, bytes, bytes | None, int | None]]:
        return sorted(
            (p, r.offset, r.key, r.value, r.horizon_ms)
            for p, recs in self.records.items() for r in recs
        )
