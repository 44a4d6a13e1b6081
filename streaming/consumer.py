"""Consume one offset range of one partition straight into Arrow record batches.

Runs inside Spark tasks: the Kafka source's reads and the mirror's write tasks
(:func:`write_range`, step 2 of :mod:`compactor.ingest.writer`'s protocol). No consumer
group is used: the range is assigned explicitly, and Spark's checkpoint plus the lake's app
transactions hold the position.
"""

from __future__ import annotations

import operator
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from itertools import chain, repeat
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import KafkaError, Message, TopicPartition

from compactor.exceptions import BrokerUnavailableError, DataLossError
from compactor.ingest.appender import append_batches, append_ranges
from compactor.ingest.writer import PartitionPlan, RangeResult
from compactor.kafka.consumer_cache import borrowed_consumer
from compactor.kafka.schema import HEADERS_TYPE, KAFKA_SCHEMA, TIMESTAMP_TYPE

# librdkafka timestamp types -> Spark's timestampType (0 CreateTime, 1 LogAppendTime).
_TS_TYPES = np.array([-1, 0, 1], dtype=np.int32)
_CONSUME_BATCH = 10_000
# consume() blocks until it has the messages asked for or this timeout passes: short, so that
# a range with gaps (compaction, transaction markers) costs milliseconds, not a second.
_CONSUME_WAIT_S = 0.05


def consume_range(
    client_config: Mapping[str, str],
    topic: str,
    partition: int,
    start: int,
    end: int,
    poll_timeout_ms: int = 120_000,
    fail_on_data_loss: bool = True,
    include_headers: bool = True,
) -> Iterator[pa.RecordBatch]:
    """Yield record batches (Spark's Kafka schema) of the offsets in [start, end), in order.

    Offsets may be missing inside the range (compacted topics, transaction markers). The
    range ends when a record at or past ``end - 1`` arrives or the consumer reaches the end
    of the partition at or past ``end``. Reaching the partition's end before ``end``, or a
    first offset past ``start`` because the log start moved, is data loss: raised, or
    logged and skipped when ``fail_on_data_loss`` is off.

    Each ``consume()`` result is checked and cut as a whole (one pass per field through C,
    not a Python loop per message): on a write task this loop is most of the time.
    """
    for _, batch in _read(client_config, [(topic, partition, start, end)], poll_timeout_ms,
                          fail_on_data_loss, include_headers):
        yield batch


def _partition_error(msg: Message, topic: str, partition: int, start: int, end: int,
                     fail_on_data_loss: bool) -> None:
    """An error event in the range: the end of the partition before ``end`` or an offset no
    longer on the broker is data loss; anything else is the broker's failure."""
    err = msg.error()
    if err.code() == KafkaError._PARTITION_EOF:
        if msg.offset() < end:
            _data_loss(f"{topic}-{partition} ends at offset {msg.offset()} but the batch "
                       f"planned to read up to {end}", fail_on_data_loss)
        return
    if err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
        _data_loss(f"offset {start} of {topic}-{partition} is no longer on the broker "
                   "(retention or a recreated topic)", fail_on_data_loss)
        return
    raise BrokerUnavailableError(
        f"error reading {topic}-{partition} at offset {msg.offset()}: {err.str()}"
    )


def _data_loss(message: str, fail: bool) -> None:
    if fail:
        raise DataLossError(
            f"{message}. Set failOnDataLoss=false (fail.on.data.loss=false) to skip lost "
            "offsets instead."
        )
    import logging

    logging.getLogger(__name__).warning("skipping lost data: %s", message)


def _spark_timestamp_types(kinds: np.ndarray) -> np.ndarray:
    """librdkafka's timestamp type of each message as Spark's; an unknown one is -1."""
    known = (kinds >= 0) & (kinds < len(_TS_TYPES))
    return np.where(known, _TS_TYPES[np.where(known, kinds, 0)], -1).astype(np.int32)


def _repeated(value: str, n: int) -> pa.Array:
    """One string ``n`` times, built from two buffers instead of ``n`` Python references."""
    data = value.encode()
    ends = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.StringArray.from_buffers(n, pa.py_buffer(ends), pa.py_buffer(data * n))


# A record whose headers confluent-kafka cannot hand over (a header key that is not UTF-8,
# which other clients can write): its headers are null in the batch, the rest as it came.
UNREADABLE: Any = object()


def _headers(messages: list[Message]) -> list[Any]:
    """Each message's headers (None for none), or UNREADABLE where they cannot be decoded.

    A message whose ``headers()`` failed keeps a half-built list that a second call would
    return (and reading it crashes the process), so each message is asked exactly once.
    """
    out: list[Any] = []
    while len(out) < len(messages):
        try:  # extend keeps what it appended before a failure: len(out) is the bad one
            out.extend(map(Message.headers, messages[len(out):]))
        except (SystemError, UnicodeDecodeError):
            out.append(UNREADABLE)
    return out


def messages_to_batch(messages: list[Message], offsets: np.ndarray,
                      include_headers: bool = True,
                      where: tuple[pa.Array, np.ndarray] | None = None) -> pa.RecordBatch:
    """Arrow columns in Spark's Kafka schema; timestamps are epoch ms turned into microseconds.

    Each field is read with ``map`` over the unbound method (C calls, no Python frame per
    message) and the (type, ms) timestamp pairs are flattened straight into one array.
    ``offsets`` are the messages' offsets, which the caller has already read to cut the range;
    ``where``, the messages' topics and partitions when they are not all of the first's.
    """
    n = len(messages)
    first = messages[0]
    topics, partitions = where if where is not None else (
        _repeated(first.topic(), n), np.full(n, first.partition(), dtype=np.int32))
    kinds_and_ms = np.fromiter(
        chain.from_iterable(map(Message.timestamp, messages)), np.int64, 2 * n).reshape(-1, 2)
    raw = _headers(messages) if include_headers else []
    if any(raw):
        headers = pa.array([None if h is UNREADABLE
                            else [{"key": k, "value": v} for k, v in (h or ())] for h in raw],
                           HEADERS_TYPE)
    else:  # the common case: no record has headers, so no per-record lists to build
        headers = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, dtype=np.int32)),
                                           pa.array([], HEADERS_TYPE.value_type),
                                           type=HEADERS_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(list(map(Message.key, messages)), pa.binary()),
            pa.array(list(map(Message.value, messages)), pa.binary()),
            topics,
            pa.array(partitions, pa.int32()),
            pa.array(offsets),
            pa.array(kinds_and_ms[:, 1] * 1000).cast(TIMESTAMP_TYPE),
            pa.array(_spark_timestamp_types(kinds_and_ms[:, 0])),
            headers,
        ],
        schema=KAFKA_SCHEMA,
    )


# A range this small is read beside the task's other small ranges by one consumer: making a
# consumer per range cost more than its records. A group holds at most _GROUP_RECORDS
# records, read into memory before they are written.
_SMALL_RANGE = 10_000
_GROUP_RECORDS = 100_000

Range = tuple[str, int, int, int]  # topic, partition, first offset, end offset (exclusive)


def consume_ranges(client_config: Mapping[str, str], ranges: Sequence[Range],
                   poll_timeout_ms: int = 120_000, fail_on_data_loss: bool = True,
                   include_headers: bool = True) -> list[list[pa.RecordBatch]]:
    """The record batches of each range, read by one consumer assigned to all of them, with
    :func:`consume_range`'s rules for each (gaps, its end, data loss); a partition leaves the
    assignment once its range is read. At most one range per partition."""
    out: list[list[pa.RecordBatch]] = [[] for _ in ranges]
    for i, batch in _read(client_config, ranges, poll_timeout_ms, fail_on_data_loss,
                          include_headers):
        out[i].append(batch)
    return out


def _read(client_config: Mapping[str, str], ranges: Sequence[Range], poll_timeout_ms: int,
          fail_on_data_loss: bool, include_headers: bool,
          ) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(index of the range, batch) as one consumer reads every range; with one range, every
    message of a ``consume()`` is that partition's (no grouping, the common case's speed)."""
    todo = {(t, p): i for i, (t, p, start, end) in enumerate(ranges) if start < end}
    if not todo:
        return
    ours = frozenset(todo)
    # At most the records each unfinished range still lacks: consume() returns as soon as
    # they are all there instead of waiting out its timeout for a full batch.
    lacking = {i: ranges[i][3] - ranges[i][2] for i in todo.values()}
    wanted = sum(lacking.values())
    with borrowed_consumer(client_config) as consumer:
        consumer.assign([TopicPartition(t, p, ranges[i][2]) for (t, p), i in todo.items()])
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while todo:
            messages = consumer.consume(max(1, min(_CONSUME_BATCH, wanted)), _CONSUME_WAIT_S)
            if not messages:
                if time.monotonic() > deadline:
                    raise BrokerUnavailableError(
                        f"no data from {_waiting_for(todo, ranges)} for {poll_timeout_ms} ms "
                        "(kafkaConsumer.pollTimeoutMs)")
                continue
            deadline = time.monotonic() + poll_timeout_ms / 1000
            finished = []
            for i, batch, done in _take_all(messages, ours, todo, ranges, fail_on_data_loss,
                                            include_headers):
                topic, partition = ranges[i][:2]
                if batch is not None:
                    lacking[i] -= batch.num_rows
                    wanted -= batch.num_rows
                    yield i, batch
                if done:
                    wanted -= lacking[i]
                    del todo[topic, partition]
                    finished.append(TopicPartition(topic, partition))
            if finished and todo:  # one call for every range this consume() finished
                consumer.incremental_unassign(finished)


Taken = tuple[int, pa.RecordBatch | None, bool]  # range index, its records, range over


def _take_all(messages: list[Message], ours: frozenset[tuple[str, int]],
              todo: Mapping[tuple[str, int], int], ranges: Sequence[Range],
              fail_on_data_loss: bool, include_headers: bool) -> list[Taken]:
    """Each unfinished range's part of a ``consume()``, with :func:`_take`'s rules: the
    records of all its ranges turned into one batch at once and sliced by range (one
    conversion per ``consume()``, not one per partition). ``ours``: every partition the read
    was given; ``todo``: those of its unfinished ranges."""
    if len(ours) == 1:
        [(tp, part)] = _by_partition(messages, ours)
        i = todo[tp]
        return [(i, *_take(part, *ranges[i], fail_on_data_loss, include_headers))]
    errors = list(map(Message.error, messages))
    failed: dict[int, tuple[int, Message]] = {}  # range: its first error event, where
    for j in [j for j, e in enumerate(errors) if e is not None]:
        tp = (messages[j].topic(), messages[j].partition())
        if tp not in ours:
            raise BrokerUnavailableError(f"error reading from Kafka: {errors[j].str()}")
        if tp in todo:
            failed.setdefault(todo[tp], (j, messages[j]))
    where = np.flatnonzero(np.fromiter(map(operator.is_, errors, repeat(None)), bool,
                                       len(errors)))  # the records' positions
    records = messages if len(where) == len(messages) else [messages[j] for j in where.tolist()]
    n = len(records)
    topics = list(map(Message.topic, records))
    partitions = np.fromiter(map(Message.partition, records), np.int32, n)
    offsets = np.fromiter(map(Message.offset, records), np.int64, n)
    owner = np.fromiter(map(todo.get, zip(topics, partitions.tolist(), strict=True),
                            repeat(-1)), np.int64, n)
    # Per range: first offset, end, and the position of its first error event, after which
    # its records are not taken (the event ends the range, as in :func:`_take`).
    bounds = np.array([(r[2], r[3], len(messages)) for r in ranges] + [(0, 0, 0)], np.int64)
    for i, (j, _) in failed.items():
        bounds[i, 2] = j
    owner[where >= bounds[owner, 2]] = -1
    start, end = bounds[owner, 0], bounds[owner, 1]  # owner -1: the (0, 0) row
    # Below start: fetched for an earlier read of a kept consumer. Offsets rise within a
    # partition, so a range is over once a record at or past its last offset came.
    over = set(owner[(owner >= 0) & (offsets >= end - 1)].tolist())
    for i, (_, event) in sorted(failed.items()):
        if i not in over:
            _partition_error(event, *ranges[i], fail_on_data_loss)
            over.add(i)
    rows = np.flatnonzero((offsets >= start) & (offsets < end))
    rows = rows[np.argsort(owner[rows], kind="stable")]
    ranked = owner[rows]
    out: list[Taken] = []
    if len(rows):
        batch = messages_to_batch([records[j] for j in rows.tolist()], offsets[rows],
                                  include_headers,
                                  (pa.array([topics[j] for j in rows.tolist()], pa.string()),
                                   partitions[rows]))
        cuts = np.flatnonzero(np.diff(ranked)) + 1
        for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)], strict=True):
            i = int(ranked[lo])
            out.append((i, batch.slice(lo, hi - lo), i in over))
            over.discard(i)
    out.extend((i, None, True) for i in sorted(over))
    return out


def _by_partition(messages: list[Message], ours: frozenset[tuple[str, int]],
                  ) -> list[tuple[tuple[str, int], list[Message]]]:
    """A ``consume()``'s messages by partition, in order; an error of the client itself (no
    partition of ours) raises."""
    if len(ours) == 1:
        return [(next(iter(ours)), messages)]
    mine: dict[tuple[str, int], list[Message]] = {}
    for m, tp in zip(messages, zip(map(Message.topic, messages),
                                   map(Message.partition, messages), strict=True),
                     strict=True):
        if tp not in ours and m.error() is not None:
            raise BrokerUnavailableError(f"error reading from Kafka: {m.error().str()}")
        mine.setdefault(tp, []).append(m)
    return list(mine.items())


def _waiting_for(todo: Mapping[tuple[str, int], int], ranges: Sequence[Range]) -> str:
    """The ranges still being read, for a message."""
    return ", ".join(f"{t}-{p} offsets [{ranges[i][2]}, {ranges[i][3]})"
                     for (t, p), i in sorted(todo.items()))


def _take(messages: list[Message], topic: str, partition: int, start: int, end: int,
          fail_on_data_loss: bool, include_headers: bool) -> tuple[pa.RecordBatch | None, bool]:
    """One partition's messages of a ``consume()`` as a batch (None: no record in its range)
    and whether its range is over."""
    errors = list(map(Message.error, messages))
    failed = next(i for i, e in enumerate(errors) if e is not None) if any(errors) else None
    records = messages if failed is None else messages[:failed]
    offsets = np.fromiter(map(Message.offset, records), np.int64, len(records))
    if len(records) and offsets[0] < start:  # fetched for an earlier read of a kept consumer
        skip = int(np.searchsorted(offsets, start))
        records, offsets = records[skip:], offsets[skip:]
    done = len(records) > 0 and int(offsets[-1]) >= end - 1
    if done:  # offsets rise within a partition: cut after the last one below end
        keep = int(np.searchsorted(offsets, end))
        records, offsets = records[:keep], offsets[:keep]
    batch = messages_to_batch(records, offsets, include_headers) if records else None
    if not done and failed is not None:
        _partition_error(messages[failed], topic, partition, start, end, fail_on_data_loss)
        done = True
    return batch, done


def write_ranges(plans: Sequence[PartitionPlan], client_config: Mapping[str, str],
                 poll_timeout_ms: int, fail_on_data_loss: bool) -> list[RangeResult]:
    """Task side for several partitions: small ranges read together by one consumer per
    group of them, larger ones each by :func:`write_range`."""
    def first(plan: PartitionPlan) -> int:
        committed = plan.committed_offset if plan.committed_offset is not None else -1
        return max(plan.start, committed + 1)

    small = [p for p in plans if p.end - first(p) <= _SMALL_RANGE]
    results = [write_range(p, client_config, poll_timeout_ms, fail_on_data_loss)
               for p in plans if p.end - first(p) > _SMALL_RANGE]
    group: list[PartitionPlan] = []
    grouped = 0  # the records of the group's ranges, kept as it grows
    for plan in [*small, None]:
        records = 0 if plan is None else plan.end - first(plan)
        if group and (plan is None or grouped + records > _GROUP_RECORDS):
            batches = consume_ranges(client_config,
                                     [(p.topic, p.partition, first(p), p.end) for p in group],
                                     poll_timeout_ms, fail_on_data_loss)
            results += append_ranges(group, batches)
            group, grouped = [], 0
        if plan is not None:
            group.append(plan)
            grouped += records
    pa.default_memory_pool().release_unused()
    return results


def write_range(
    plan: PartitionPlan,
    client_config: Mapping[str, str],
    poll_timeout_ms: int,
    fail_on_data_loss: bool,
) -> RangeResult:
    """Task side: consume the plan's range and write its segment files (step 2)."""
    committed = plan.committed_offset if plan.committed_offset is not None else -1
    batches = consume_range(
        client_config, plan.topic, plan.partition, max(plan.start, committed + 1), plan.end,
        poll_timeout_ms, fail_on_data_loss,
    )
    try:
        return append_batches(plan, batches)
    finally:
        # Arrow's allocator keeps freed pages; a reused worker would hold the
        # high-water mark of every range it ever wrote.
        pa.default_memory_pool().release_unused()


def warm_up(_task: int) -> int:
    """A task that readies a Python worker for :func:`write_range`: importing this module
    has loaded pyarrow, confluent-kafka and the writer, and Spark keeps the worker for the
    next task (``spark.python.worker.reuse``). The short wait keeps the slot busy, so that
    each core's task forks a worker of its own. Returns the worker's pid."""
    time.sleep(0.2)
    return os.getpid()
