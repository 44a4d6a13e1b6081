"""``latest_per_key`` against the rule written plainly: within a partition the highest offset
wins; across partitions the latest timestamp, then the higher partition."""

import random
from datetime import UTC, datetime

import pyarrow as pa

from compactor.kafka.schema import KAFKA_SCHEMA
from compactor.lake.latest_table import latest_per_key


def reference(rows: list[dict]) -> dict[bytes, tuple[int, int]]:
    last: dict[tuple[bytes, int], dict] = {}
    for r in rows:
        if r["key"] is None:
            continue
        held = last.get((r["key"], r["partition"]))
        if held is None or r["offset"] > held["offset"]:
            last[(r["key"], r["partition"])] = r
    best: dict[bytes, dict] = {}
    for (key, _p), r in last.items():
        held = best.get(key)
        if held is None or (r["timestamp"], r["partition"]) > (held["timestamp"],
                                                               held["partition"]):
            best[key] = r
    return {k: (r["partition"], r["offset"]) for k, r in best.items()}


def test_latest_per_key_follows_the_rule_on_random_tables() -> None:
    rng = random.Random(5)
    for _ in range(300):
        next_offset = {0: 0, 1: 0, 2: 0}
        rows = []
        for i in range(rng.randint(0, 60)):
            p = rng.randint(0, 2)
            rows.append({"key": rng.choice([None, b"a", b"b", b"c", b"d"]),
                         "value": rng.choice([None, b"v%d" % i]), "topic": "t",
                         "partition": p, "offset": next_offset[p],
                         "timestamp": datetime.fromtimestamp(rng.randint(0, 5), UTC),
                         "timestampType": 0, "headers": []})
            next_offset[p] += 1
        rng.shuffle(rows)  # the function must not rely on the order it is given
        out = latest_per_key(pa.Table.from_pylist(rows, schema=KAFKA_SCHEMA))
        got = {r["key"]: (r["partition"], r["offset"]) for r in out.to_pylist()}
        assert got == reference(rows)
        assert out.num_rows == len(got)
