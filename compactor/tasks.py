"""How work is shared out among Spark tasks: one task per core, balanced by size.

A Spark task costs a Python worker round trip whatever it does, so work made of many small
pieces (a micro-batch's ranges over hundreds of partitions, a cleaning pass over hundreds of
dirty partitions) runs as at most one task per core, each doing its pieces in turn.
"""

from __future__ import annotations

import copyreg
import heapq
import io
import pickle
from types import MappingProxyType
from typing import Any


def balanced_groups(sizes: list[int], groups: int) -> list[list[int]]:
    """Indexes of ``sizes`` in at most ``groups`` groups of near-equal total size, largest
    first (longest processing time first), each group in index order; no group is empty."""
    count = max(1, min(groups, len(sizes)))
    members: list[list[int]] = [[] for _ in range(count)]
    # (load, members, group): the least loaded group, then the emptier, then the first.
    heap = [(0, 0, g) for g in range(count)]
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True):
        load, n, least = heapq.heappop(heap)
        members[least].append(i)
        heapq.heappush(heap, (load + sizes[i], n + 1, least))
    return [sorted(m) for m in members if m]


def task_groups(sizes: list[int], cores: int, min_tasks: int = 0,
                max_size: int = 0) -> list[list[int]]:
    """:func:`balanced_groups` of ``sizes`` for Spark tasks: one per core, at least
    ``min_tasks``, and enough that none holds more than ``max_size`` (0: no bound) as far as
    whole pieces allow (a piece is not cut); never more groups than pieces."""
    count = max(1, cores, min_tasks)
    if max_size > 0:
        count = max(count, -(-sum(sizes) // max_size))
    while True:
        groups = balanced_groups(sizes, count)
        if (max_size <= 0 or count >= len(sizes)
                or max(sum(sizes[i] for i in g) for g in groups) <= max_size):
            return groups
        count += max(1, count // 4)  # balancing by size can miss the bound: more groups


def _proxy(items: dict[Any, Any]) -> MappingProxyType[Any, Any]:
    return MappingProxyType(items)


def _reduce_proxy(proxy: MappingProxyType[Any, Any]) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _proxy, (dict(proxy),)


_TABLE = {**copyreg.dispatch_table, MappingProxyType: _reduce_proxy}


def task_pickle(obj: object) -> bytes:
    """``obj`` by the standard pickle (a task's plans or results, sent as one blob: Spark's
    cloudpickle visits each of hundreds of objects in Python), the config's read-only
    mappings included."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = _TABLE
    pickler.dump(obj)
    return out.getvalue()
