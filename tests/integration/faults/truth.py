"""The hunt's check: the lake's log against what the producer wrote, after every kill."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.compute as pc
from deltalake import DeltaTable

from compactor.lake.segments import read_partition_logs
from tests.conftest import wait_until
from tests.integration.faults.producer import Producer
from tests.integration.helpers import created


@dataclass
class Report:
    kills: int = 0
    mid_commit: int = 0  # kills while uncommitted data files were on disk
    hits: dict[str, int] = field(default_factory=dict)  # aim -> kills that caught it
    aimed: dict[str, int] = field(default_factory=dict)  # aim -> kills aimed at it
    restarts: int = 0
    checks: int = 0
    records_checked: int = 0
    lost: list[str] = field(default_factory=list)
    # [kill, first commit of the next run] in epoch ms: nothing of the mirror runs then.
    downtime: list[tuple[int, int]] = field(default_factory=list)

    def down_between(self, start_ms: int, end_ms: int) -> int:
        return sum(max(0, min(b, end_ms) - max(a, start_ms)) for a, b in self.downtime)


def committed(log_dir: Path) -> dict[int, int | None]:
    """Each partition's last offset the lake's log committed."""
    if not created(log_dir):
        return {}
    return {p: plog.committed_offset
            for p, plog in read_partition_logs(DeltaTable(str(log_dir))).items()}


@dataclass
class Truth:
    """Per partition, the latest record of every key produced up to an offset, folded in as
    the hunt goes: a check costs the new records and the lake's rows, not the whole run."""

    upto: dict[int, int] = field(default_factory=dict)  # partition -> last offset folded
    latest: dict[int, dict[bytes, tuple[int, bytes | None]]] = field(default_factory=dict)

    def fold(self, producer: Producer, partition: int, committed: int) -> int:
        """Fold the visible records of ``partition`` up to ``committed``; how many."""
        done = self.upto.get(partition, -1)
        with producer.lock:
            offsets = producer.visible[partition]
            new = [(o, producer.sent[partition][o]) for o in
                   offsets[bisect_right(offsets, done):bisect_right(offsets, committed)]]
        latest = self.latest.setdefault(partition, {})
        for o, r in new:
            latest[r.key] = (o, r.value)
        self.upto[partition] = max(done, committed)
        return len(new)


def erased_ahead(producer: Producer, partition: int, key: bytes, offset: int) -> bool:
    """Whether the topic holds a tombstone of ``key`` past ``offset``: a restarted mirror
    that finds the key erased on the broker drops its values before it reads that far
    (:mod:`compactor.erasure.reconcile`), so the value may leave the lake early."""
    with producer.lock:
        return any(o > offset and r.key == key and r.value is None
                   for o, r in producer.sent[partition].items())


def check(log_uri: str, producer: Producer, report: Report, truth: Truth) -> None:
    """The lake's log against what was produced, up to the offsets the lake committed: every
    offset once, each row the record Kafka holds there, never an aborted record, every key's
    latest record (or its tombstone's absence past its horizon), a cleaned part without
    repeated keys."""
    table = DeltaTable(log_uri)
    logs = read_partition_logs(table)
    rows = table.to_pyarrow_dataset().to_table(columns=["partition", "offset", "key", "value"])
    # The broker may hold (and the lake mirror) a batch whose produce() has not returned
    # yet; a committed position may be a transaction marker's offset.
    wait_until(lambda: all(producer.known[p] >= (plog.committed_offset or -1)
                           for p, plog in logs.items()), 30, "the producer's bookkeeping")
    report.checks += 1
    for p, plog in logs.items():
        mine = rows.filter(pc.equal(rows.column("partition"), p))
        offsets = mine.column("offset").to_pylist()
        keys, values = mine.column("key").to_pylist(), mine.column("value").to_pylist()
        committed_offset = plog.committed_offset if plog.committed_offset is not None else -1
        assert len(offsets) == len(set(offsets)), f"partition {p}: an offset is duplicated"
        report.records_checked += truth.fold(producer, p, committed_offset)
        with producer.lock:
            aborted = [o for o in offsets if o in producer.aborted[p]]
            unknown = [o for o in offsets if o not in producer.sent[p]]
            originals = {o: (producer.sent[p][o].key, producer.sent[p][o].value)
                         for o in offsets if o in producer.sent[p]}
        assert not aborted, f"partition {p}: aborted records mirrored at {aborted[:5]}"
        assert not unknown, f"partition {p}: offsets never produced visibly {unknown[:5]}"
        lake_latest: dict[bytes, tuple[int, bytes | None]] = {}
        for o, k, v in zip(offsets, keys, values, strict=True):
            assert (k, v) == originals[o], f"partition {p} offset {o} differs"
            if k not in lake_latest or o > lake_latest[k][0]:
                lake_latest[k] = (o, v)
        for key, (o, v) in truth.latest.get(p, {}).items():
            got = lake_latest.get(key)
            if v is None:  # a tombstone: it, or nothing once its horizon passed
                if got is not None and got != (o, None):
                    report.lost.append(f"p{p} {key!r}: tombstone {o} but lake has {got}")
            elif got != (o, v) and not (erased_ahead(producer, p, key, o)
                                        and (got is None or got[1] is None)):
                report.lost.append(f"p{p} {key!r}: latest {o} but lake has {got}")
        clean_below = plog.cleaner_offset or 0
        cleaned = [k for o, k in zip(offsets, keys, strict=True) if o < clean_below]
        assert len(cleaned) == len(set(cleaned)), f"partition {p}: cleaned part repeats a key"
