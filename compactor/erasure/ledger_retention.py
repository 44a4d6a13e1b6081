"""Retention of the erasure ledger: an erasure leaves ``L/T/erasures``
``erasure.ledger.retention.ms`` after every target finished it.

Without it the ledger keeps every tombstone a topic ever carried (about 350,000 rows a day at
4 tombstones a second), and what the running mirror reads at start grows with that history for
as long as it runs. Its rows are salted digests of erased keys: pseudonymous data, which should
not outlive its use either. What stays: every erasure some target has not finished, every
erasure finished within the retention, and how many of those removed missed their deadline
(``compactor-pruned-late``), so that the missed-deadline figures go on counting them.

What leaves, per partition p. Targets finish a prefix of the offsets, so with the cutoff
C = now - retention, B_p = min(the ledger's scan position of p, the lowest over the targets of
the highest offset that target reported done before C). Every tombstone at or below B_p was
finished by every target before C, and every done event up to B_p covers only such tombstones:
both leave. B_p never passes the scan position: done events above it are waiting for
tombstones not recorded yet.

Commit protocol of :meth:`LedgerRetention.prune` (the caller holds the commit lock):

1. Skip when the retention is -1 or this topic's last check is less than a check interval ago
   (a 24th of the retention, at least a minute). Open the ledger at its latest version V; skip
   when no file holds an event older than C (the files' ``atMs`` statistics).
2. Read the done events older than C (younger files are skipped by their statistics) and the
   scan positions; compute B_p and keep the partitions where it passed ``compactor-pruned-<p>``.
3. Read those partitions' tombstones in (pruned, B_p] and count those finished after their
   deadline.
4. DELETE ``partition = p AND offset <= B_p`` for those partitions in one commit against V that
   moves ``compactor-pruned-<p>`` to B_p and ``compactor-pruned-late`` up by the count. A
   concurrent prune (another process) removes the same files and makes this commit fail;
   appends of new events commit beside it, their offsets being above every B_p.
5. The files the DELETE rewrote leave the disk at the first vacuum past the grace, and the
   digests with them.

A :class:`~compactor.erasure.backlog.BacklogFollower` that meets the DELETE (files removed with
``dataChange``) reads the ledger whole again, which the retention bounds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from compactor.erasure.backlog import EVENT, state_of
from compactor.lake import operations
from compactor.lake.layout import open_table
from compactor.lake.storage import Storage
from compactor.positions import LEDGER, PRUNED, PRUNED_LATE

log = logging.getLogger(__name__)

MIN_CHECK_EVERY_MS = 60_000


def check_every_ms(retention_ms: int) -> int:
    """How often a topic's ledger is checked: the ledger so holds at most about 1/24 more
    than the retention, and a check costs a read of the events older than the cutoff."""
    return max(MIN_CHECK_EVERY_MS, retention_ms // 24)


def prune_bounds(done_before: Mapping[tuple[str, int], int], scanned: Mapping[int, int],
                 pruned: Mapping[int, int], targets: list[str]) -> dict[int, int]:
    """B_p (module docstring) for each partition where it passed the last prune.

    ``done_before``: (target, partition) -> the highest offset the target reported done before
    the cutoff; ``scanned``: the ledger's scan position per partition; ``pruned``: the last
    prune's B_p per partition. A partition some target has not reported before the cutoff
    keeps everything."""
    bounds = {}
    for partition, position in scanned.items():
        ups = [done_before.get((target, partition)) for target in targets]
        if not ups or any(u is None for u in ups):
            continue
        bound = min(position, *(u for u in ups if u is not None))
        if bound > pruned.get(partition, -1):
            bounds[partition] = bound
    return bounds


class LedgerRetention:
    """Removes finished erasures older than the retention from each topic's ledger."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self._checked: dict[str, int] = {}  # topic -> wall-clock ms of its last check

    def prune(self, topic: str, path: str, targets: list[str], retention_ms: int,
              now_ms: int | None = None) -> int:
        """Remove the erasures every target finished more than ``retention_ms`` ago (steps 1-4);
        returns how many left the ledger. A ledger that cannot be read
        or pruned is only kept longer: a warning, and the next check tries again."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        last = self._checked.get(topic)
        if retention_ms < 0 or (last is not None and now - last < check_every_ms(retention_ms)):
            return 0
        self._checked[topic] = now
        try:
            return self._prune(topic, path, targets, now - retention_ms)
        except Exception as exc:  # delta-rs's and pyarrow's errors alike
            log.warning("%s: cannot prune the erasure ledger %s: %s", topic, path, exc)
            return 0

    def _prune(self, topic: str, path: str, targets: list[str], cutoff: int) -> int:
        table = open_table(path, self._storage)
        if table is None or not _holds_events_before(table, cutoff):
            return 0
        dataset = table.to_pyarrow_dataset()
        done = dataset.to_table(
            columns=["partition", "offset", "target", "atMs"],
            filter=(EVENT == "done") & (pc.field("atMs") < cutoff))
        done_before: dict[tuple[str, int], int] = {}
        for row in done.group_by(["target", "partition"]).aggregate(
                [("offset", "max")]).to_pylist():
            done_before[(row["target"], row["partition"])] = row["offset_max"]
        partitions = {p for _, p in done_before}
        scanned = {p: s for p in partitions if (s := LEDGER.read(table, p)) is not None}
        pruned = {p: s for p in partitions if (s := PRUNED.read(table, p)) is not None}
        bounds = prune_bounds(done_before, scanned, pruned, targets)
        if not bounds:
            return 0
        leaving = EVENT == "tombstone"
        which = None
        for p, bound in bounds.items():
            part = ((pc.field("partition") == p) & (pc.field("offset") > pruned.get(p, -1))
                    & (pc.field("offset") <= bound))
            which = part if which is None else which | part
        tombstones = dataset.to_table(
            columns=["partition", "offset", "tombstoneTimeMs", "deadlineMs"],
            filter=leaving & which)
        mine = pc.is_in(done["partition"], pa.array(list(bounds), pa.int32()))
        late = state_of(tombstones, done.filter(mine), scanned, targets).finished_late
        return self._delete(table, topic, bounds, tombstones.num_rows, late)

    def _delete(self, table: DeltaTable, topic: str, bounds: Mapping[int, int], erasures: int,
                late: int) -> int:
        """Delete the finished erasures up to ``bounds`` in one commit that moves the pruned
        positions (step 4); returns how many left."""
        predicate = " OR ".join(f'("partition" = {p} AND "offset" <= {b})'
                                for p, b in sorted(bounds.items()))
        total_late = (PRUNED_LATE.read(table) or 0) + late
        txns = [PRUNED.moved_to(b, p) for p, b in bounds.items()]
        txns.append(PRUNED_LATE.moved_to(total_late))
        summary = (f"{erasures} finished erasures of {topic} past the ledger's retention "
                   f"removed (" + ", ".join(f"partition {p} up to offset {b}"
                                            for p, b in sorted(bounds.items())) + ")")
        try:
            table.delete(predicate, commit_properties=operations.properties(
                operations.PRUNE_LEDGER, summary, txns))
        except CommitFailedError as exc:  # another process pruned first
            log.info("%s: the erasure ledger moved during its prune (%s); next check", topic, exc)
            return 0
        log.info("%s", summary)
        return erasures


def _holds_events_before(table: DeltaTable, cutoff: int) -> bool:
    """Whether some file may hold an event older than ``cutoff``, from its statistics (a file
    without them may)."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if not actions.num_rows:
        return False
    if "min.atMs" not in actions.column_names:
        return True
    oldest = actions.column("min.atMs")
    return bool(pc.any(pc.or_kleene(oldest.is_null(),
                                    pc.less(oldest, cutoff))).as_py())
