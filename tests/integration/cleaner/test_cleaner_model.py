"""Property test: the cleaned lake log equals the reference model over random workloads.

Real Delta tables on disk and the product's own ingest, cleaning and commit code; no broker
or Spark (tasks run in-process), so hypothesis can try many workloads. Crashes are injected
between a cleaning pass's file writes and its commit, and between an ingest batch's file
writes and its commit (followed by the replay a restart would do).
"""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from compactor.cleaner.maintenance import LogMaintenance
from compactor.cleaner.offset_map import BYTES_PER_ENTRY
from tests.lake import append, log_rows, offline_config
from tests.oracle import Rec, ReferenceLog

T0 = 1_700_000_000_000
TOPIC = "prop"

step = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 1),
              st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=25),
              st.booleans()),
    st.tuples(st.just("clean"), st.integers(0, 40_000), st.booleans(), st.just(None)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(step, min_size=2, max_size=12),
    segment_bytes=st.integers(20, 200),
    map_entries=st.integers(1, 6),
    delete_retention_ms=st.integers(0, 20_000),
    min_lag_ms=st.sampled_from([0, 0, 5_000]),
)
# Found by hypothesis: pass 1 cleans the last segment (rolled by time) and drops its earliest
# records; that moved its roll deadline later, it counted as active again, and pass 2 could
# no longer drop the tombstone whose horizon had passed. A cleaned segment stays closed.
@example(steps=[("append", 0, [(0, False)], False),
                ("append", 1, [(0, False)] * 5 + [(1, True), (2, False)], False),
                ("append", 0, [(0, False)] * 8, False),
                ("clean", 201, False, None), ("clean", 0, False, None)],
         segment_bytes=38, map_entries=2, delete_retention_ms=0, min_lag_ms=0)
def test_lake_equals_reference_model(steps, segment_bytes, map_entries, delete_retention_ms,
                                     min_lag_ms) -> None:
    with tempfile.TemporaryDirectory() as lake:
        config = offline_config(
            lake, TOPIC, cleanup_policy="compact", segment_bytes=segment_bytes,
            segment_ms=10_000, min_cleanable_dirty_ratio=0.01,
            min_compaction_lag_ms=min_lag_ms, delete_retention_ms=delete_retention_ms,
            **{"log.cleaner.dedupe.buffer.size": str(map_entries * BYTES_PER_ENTRY),
               "log.cleaner.io.buffer.load.factor": "1.0"})
        model = ReferenceLog(delete_retention_ms, map_entries)
        maintenance = LogMaintenance(None, config)
        next_offset = {0: 0, 1: 0}
        now = T0
        for kind, a, b, crash in steps:
            if kind == "append":
                partition, items = a, b
                recs = []
                for key, tombstone in items:
                    now += 700
                    value = None if tombstone else b"v%d-%d" % (key, next_offset[partition])
                    recs.append(Rec(next_offset[partition], b"k%d" % key, value, now))
                    next_offset[partition] += 1
                rows = [(r.offset, r.key, r.value, r.timestamp_ms) for r in recs]
                if crash:  # files written, process dies before the commit; restart replays
                    append(config, TOPIC, partition, rows, now, commit=False)
                append(config, TOPIC, partition, rows, now)
                model.append(partition, recs)
            else:
                now += a
                force = b
                if crash:
                    report = maintenance.run_pass(force=force, dry_run=True, now_ms=now)
                    planned = maintenance._plans(list(config.topics), force, now, report)
                    maintenance._execute([p.plan for p in planned])  # written, never committed
                report = maintenance.run_pass(force=force, now_ms=now)
                for outcome in report.outcomes:
                    result = outcome.result
                    if result is None:
                        continue
                    assert result.error is None, result.error
                    expected = model.clean(outcome.partition, outcome.range.first_dirty_offset,
                                           outcome.range.first_uncleanable_offset, now)
                    assert result.checkpoint == expected
            if any(next_offset.values()):
                assert log_rows(config, TOPIC) == model.rows()
