"""``moved_records`` against the rule written plainly: per key seen in several partitions
whose newest record (latest timestamp, then the higher partition; within a partition the
highest offset) is a tombstone, every other partition lost, up to its highest offset."""

import random
from datetime import UTC, datetime

import pyarrow as pa

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.moved_keys import moved_records

ROWS = pa.schema([("key", pa.binary()), ("partition", pa.int32()), ("offset", pa.int64()),
                  ("timestamp", pa.int64()), ("tombstone", pa.bool_())])


def reference(rows: list[dict]) -> set[tuple[bytes, int, int]]:
    last: dict[tuple[bytes, int], dict] = {}
    for r in rows:
        if r["key"] is not None and ((r["key"], r["partition"]) not in last
                                     or r["offset"] > last[(r["key"], r["partition"])]["offset"]):
            last[(r["key"], r["partition"])] = r
    lost = set()
    for key in {k for k, _ in last}:
        mine = [r for (k, _), r in last.items() if k == key]
        if any(r["ts"] is None for r in mine):
            continue  # undated: which one is newer is not known, nothing goes
        best = max(mine, key=lambda r: (r["ts"], r["partition"]))
        if best.get("value", b"") is None:  # a newer value in another partition erases nothing
            lost |= {(key, r["partition"], r["offset"]) for r in mine if r is not best}
    return lost


def test_moved_records_follow_the_rule_on_random_ranges_and_tables() -> None:
    rng = random.Random(11)
    erasing = 0
    for _ in range(300):
        offsets = {0: 0, 1: 0, 2: 0}
        rows = []
        for i in range(rng.randint(0, 40)):
            p = rng.randint(0, 2)
            rows.append({"key": rng.choice([None, b"a", b"b", b"c"]),
                         "value": rng.choice([None, b"v%d" % i]), "topic": "t",
                         "partition": p, "offset": offsets[p],
                         "ts": rng.choice([None] + [rng.randint(1, 5)] * 20)})
            offsets[p] += 1
        # The table holds a row of some keys from an earlier range (lower offsets there).
        table = [{"key": k, "partition": rng.randint(0, 2), "offset": -rng.randint(1, 9),
                  "ts": rng.randint(0, 6)} for k in (b"a", b"b", b"c") if rng.random() < 0.5]
        records = pa.Table.from_pylist([
            {**{k: v for k, v in r.items() if k != "ts"}, "timestampType": 0, "headers": [],
             "timestamp": None if r["ts"] is None else datetime.fromtimestamp(r["ts"], UTC)}
            for r in rows], schema=KAFKA_SCHEMA)
        target = pa.Table.from_pylist([{**r, "timestamp": r["ts"] * 1000, "tombstone": False}
                                       for r in table], schema=ROWS)
        got = moved_records(records, target)
        model = reference(rows + table)
        assert set(zip(*(got.column(c).to_pylist() for c in ("key", "partition", "offset")),
                       strict=True)) == model
        erasing += bool(model)
    assert erasing > 30  # the cases are not all empty
