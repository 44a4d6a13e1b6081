"""How work is shared out among Spark tasks: one task per core, balanced by size.

A Spark task costs a Python worker round trip whatever it does, so work made of many small
pieces (a micro-batch's ranges over hundreds of partitions, a cleaning pass over hundreds of
dirty partitions) runs as at most one task per core, each doing its pieces in turn.
"""

from __future__ import annotations


def balanced_groups(sizes: list[int], groups: int) -> list[list[int]]:
    """Indexes of ``sizes`` in at most ``groups`` groups of near-equal total size, largest
    first (longest processing time first), each group in index order; no group is empty."""
    count = max(1, min(groups, len(sizes)))
    loads = [0] * count
    members: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        least = min(range(count), key=lambda g: (loads[g], len(members[g])))
        members[least].append(i)
        loads[least] += sizes[i]
    return [sorted(m) for m in members if m]


def task_count(sizes: list[int], cores: int, min_tasks: int = 0, max_size: int = 0) -> int:
    """How many tasks share out work of ``sizes``: one per core, at least ``min_tasks``, and
    enough that none holds more than ``max_size`` (0: no bound) when the pieces allow it;
    never more than the pieces (a piece is not cut)."""
    wanted = max(1, cores, min_tasks)
    if max_size > 0:
        wanted = max(wanted, -(-sum(sizes) // max_size))
    return max(1, min(wanted, len(sizes)))
