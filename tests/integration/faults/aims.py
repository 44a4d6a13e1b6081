"""What each kill of the hunt aims at, and how the hunt sees from outside the process that
the moment has come: files on disk newer than a table's last commit, files vanishing.

Every probe tolerates files the product removes while it looks (vacuum, the Delta log's
expired-commit cleanup).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

_LOG_FILE = re.compile(r"^(\d{20})-(\d{20})\.")


def _mtime(path: Path) -> float | None:
    """A file's modification time; None once the product removed it since the listing."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def data_files(table_dir: Path) -> list[Path]:
    """Parquet data files, not the Delta log's checkpoints. ``os.walk`` skips a directory
    the product removed (emptied by vacuum) between listing its parent and entering it."""
    return [Path(root, name) for root, dirs, names in os.walk(table_dir)
            if "_delta_log" not in Path(root).parts
            for name in names if name.endswith(".parquet")]


def _names(directory: Path) -> list[str]:
    """The file names in ``directory``; none once the product removed it."""
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _last_commit(table_dir: Path) -> float | None:
    commits = [t for c in (table_dir / "_delta_log").glob("*.json")
               if (t := _mtime(c)) is not None]
    return max(commits) if commits else None


def uncommitted(table_dir: Path) -> list[Path]:
    """Data files newer than the table's last Delta commit: a write not committed yet."""
    last = _last_commit(table_dir)
    if last is None:
        return []
    return [f for f in data_files(table_dir) if (t := _mtime(f)) is not None and t > last]


def in_flight(table_dir: Path) -> bool:
    """True while some write to the table has files on disk and no commit yet."""
    return bool(uncommitted(table_dir))


def _split_log_writes(log_dir: Path) -> tuple[bool, bool]:
    """(an ingest is in flight, a rewrite is in flight) in the log: an uncommitted file that
    starts past every earlier file of its partition is new records; one that starts at or
    below their end rewrites records the log holds (cleaning, consolidation, retention)."""
    new = uncommitted(log_dir)
    if not new:
        return False, False
    fresh = set(new)
    ingest = rewrite = False
    for f in new:
        first = _LOG_FILE.match(f.name)
        if first is None:
            continue
        ends = [int(m.group(2)) for name in _names(f.parent)
                if f.parent / name not in fresh and (m := _LOG_FILE.match(name))]
        if ends and int(first.group(1)) <= max(ends):
            rewrite = True
        else:
            ingest = True
    return ingest, rewrite


class Vacuuming:
    """True once the number of data files falls: vacuum is deleting files right now."""

    def __init__(self, table_dir: Path) -> None:
        self.table_dir, self.seen = table_dir, len(data_files(table_dir))

    def __call__(self) -> bool:
        now = len(data_files(self.table_dir))
        fell, self.seen = now < self.seen, now
        return fell


# The aims in turn: any moment; start-up (before the run's first ingest commit); an ingest
# commit, a cleaning rewrite, the latest-value MERGE, a downstream MERGE and the erasure
# ledger's appends and prune, each with its files written and no commit yet; a vacuum
# deleting files.
AIMS = ("any moment", "start-up", "ingest commit", "cleaning rewrite", "table merge",
        "downstream merge", "vacuum", "ledger write")


def probe(aim: str, topic_dir: Path, downstream: Path) -> Callable[[], bool]:
    """A function that answers whether the moment ``aim`` names is now."""
    log = topic_dir / "log"
    probes: dict[str, Callable[[], bool]] = {
        "any moment": lambda: True,
        "ingest commit": lambda: _split_log_writes(log)[0],
        "cleaning rewrite": lambda: _split_log_writes(log)[1],
        "table merge": lambda: in_flight(topic_dir / "table"),
        "downstream merge": lambda: in_flight(downstream),
        "vacuum": Vacuuming(log),
        "ledger write": lambda: in_flight(topic_dir / "erasures"),
    }
    return probes[aim]
