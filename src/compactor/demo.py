"""``compactor demo``: the whole product on one machine with nothing but the install."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.broker import EmbeddedBroker
from compactor.config import build_config
from compactor.exceptions import ConfigError
from compactor.layout import read_table, topic_paths
from compactor.ledger import ErasureLedger
from compactor.maintenance import PassReport
from compactor.workload import produce, profile_workload
from compactor.writer import BatchStats

TOPIC = "users"
PARTITIONS = 3
MARKER = ".compactor-demo"
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1024 * 1024),
    "min.cleanable.dirty.ratio": "0.5",
    # The erasure deadline: long enough for Spark's cold start on 2 cores (about 20 s), so
    # the demo can keep it; the ledger's count of missed deadlines shows whether it did.
    "max.compaction.lag.ms": "40000",
    "delete.retention.ms": "30000",
}


def say(text: str = "") -> None:
    print(text, flush=True)


def _prepare(directory: Path) -> None:
    """Replace a previous demo's output, but never a directory the demo did not create."""
    if directory.exists() and any(directory.iterdir()):
        if not (directory / MARKER).exists():
            raise ConfigError(
                "--dir", str(directory), "exists, is not empty and was not made by the demo",
                "pass --dir with a new or empty directory",
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / MARKER).write_text("made by compactor demo; removed by the next demo run\n")


def run_demo(directory: str, users: int = 20_000, updates: int = 200_000) -> int:
    """Start a broker, produce, mirror, verify and show; returns the exit code."""
    from deltalake import DeltaTable

    from compactor.service import Service

    out = Path(directory).resolve()
    _prepare(out)
    lake = out / "lake"
    began = time.monotonic()
    say(f"[1/5] starting the embedded Kafka-compatible broker (Tansu), log in {out}/broker.log")
    with EmbeddedBroker(out / "broker.log") as broker:
        say(f"      listening on {broker.bootstrap_servers}")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=TOPIC_CONFIG)])[TOPIC].result()
        del admin
        settings = ", ".join(f"{k}={v}" for k, v in TOPIC_CONFIG.items())
        say(f"[2/5] topic '{TOPIC}': {PARTITIONS} partitions, {settings}")
        workload_start = int(time.time() * 1000)
        workload = profile_workload(users, updates, PARTITIONS, start_ms=workload_start)
        t0 = time.monotonic()
        produce(broker.bootstrap_servers, TOPIC, workload.records,
                progress=lambda i: say(f"      produced {i:,} records"))
        say(f"      produced {len(workload.records):,} records for {users:,} users in "
            f"{time.monotonic() - t0:.1f}s: profile updates, {len(workload.deleted_users):,} "
            f"GDPR deletions (tombstones), {workload.null_keys} records with no key")

        config = build_config({
            "bootstrap.servers": broker.bootstrap_servers,
            "topics": TOPIC,
            "lake.path": str(lake),
            "checkpoint.path": str(out / "checkpoints"),
            "max.offsets.per.trigger": "80000",
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
        })
        t0 = time.monotonic()
        say(f"[3/5] mirroring into {topic_paths(str(lake), TOPIC).log} with Spark "
            "(local[2], one task per partition)")
        service = Service(config)
        service.install_signal_handlers()
        t0 = time.monotonic()
        passes: list[PassReport] = []

        def on_batch(batch_id: int, stats: Mapping[str, BatchStats]) -> None:
            s = stats[TOPIC]
            say(f"      micro-batch {batch_id}: {s.records:,} records into {s.files} segment "
                f"files, {s.rejected} rejected")

        def on_pass(report: PassReport) -> None:
            if not passes:
                say(f"      mirrored {len(workload.records) - workload.null_keys:,} records "
                    f"in {time.monotonic() - t0:.1f}s including Spark start-up")
                say("[4/5] cleaning with Kafka's log cleaner rules (dirty ratio above "
                    f"{TOPIC_CONFIG['min.cleanable.dirty.ratio']}, active segment untouched)")
            passes.append(report)
            for o in sorted(report.cleaned, key=lambda o: o.partition):
                st = o.result.stats if o.result else None
                if st is None:
                    continue
                say(f"      partition {o.partition}: dirty ratio {o.range.dirty_ratio:.2f}, "
                    f"{st.records_dropped:,} superseded records dropped, "
                    f"{st.tombstones_stamped} tombstones kept until their horizon; rewrote "
                    f"{st.record_bytes_written / 1e6:.2f} MB where Kafka's cleaner recopies "
                    f"{st.kafka_model_bytes / 1e6:.2f} MB")

        summary = service.run(once=True, on_batch=on_batch, on_pass=on_pass)
        tc = service.config.topic(TOPIC)
        wait_s = (workload_start + tc.cleaning_lag_ms) / 1000 - time.time()
        if wait_s > 0:
            say(f"      the tombstones sit in active segments, which are never cleaned; waiting "
                f"{wait_s:.0f}s until the erasure deadline forces them to roll (KIP-354)")
            time.sleep(wait_s + 1)
            on_pass(service.clean(None, force=False, dry_run=False))
            summary.cleaning.add(passes[-1])
        say(f"      {summary.cleaning.partitions_cleaned} partitions cleaned in {len(passes)} "
            f"passes")

        say("[5/5] what the lake holds")
        paths = topic_paths(str(lake), TOPIC)
        table = read_table(DeltaTable(paths.log),
            columns=["partition", "segment", "offset", "key", "value"])
        say("      partition  segments   records  offsets")
        closed_ok = True
        for p in range(PARTITIONS):
            rows = table.filter(pc.equal(table.column("partition"), p))
            offsets = rows.column("offset").to_pylist()
            segments = rows.column("segment").to_pylist()
            say(f"      {p:>9}  {len(set(segments)):>8}  {rows.num_rows:>8}  "
                f"{min(offsets)}..{max(offsets)}")
            active = max(segments)
            closed_keys = [k for k, s in zip(rows.column("key").to_pylist(), segments,
                                             strict=True) if s < active]
            closed_ok = closed_ok and len(closed_keys) == len(set(closed_keys))
        rejected = read_table(DeltaTable(paths.rejected), columns=["offset", "reason"])
        reason = rejected.column("reason")[0].as_py() if rejected.num_rows else ""
        say(f"      rejected: {rejected.num_rows} records ({reason})")
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        for key, offset, value in zip(table.column("key").to_pylist(),
                                      table.column("offset").to_pylist(),
                                      table.column("value").to_pylist(), strict=True):
            if key not in latest or offset > latest[key][0]:
                latest[key] = (offset, value)
        expected = workload.latest
        latest_ok = {k: v for k, (_, v) in latest.items()} == expected
        say(f"      check: the latest value of all {len(expected):,} keys is in the lake: "
            f"{'OK' if latest_ok else 'MISMATCH'}")
        say(f"      check: closed segments hold one record per key: "
            f"{'OK' if closed_ok else 'MISMATCH'}")
        say(f"      {table.num_rows:,} records remain of {summary.ingest.records:,} mirrored")
        erased = pc.is_in(table.column("key"),
                          pa.array(sorted(workload.deleted_users), pa.binary()))
        leftovers = table.filter(pc.and_(erased, pc.is_valid(table.column("value")))).num_rows
        erased_ok = leftovers == 0
        say(f"      check: no value of the {len(workload.deleted_users)} erased users is left in "
            f"the log: {'OK' if erased_ok else f'{leftovers} LEFT'} (their tombstones go "
            f"after delete.retention.ms={TOPIC_CONFIG['delete.retention.ms']})")
        backlog = ErasureLedger(service.config).backlog(TOPIC)
        say(f"      erasure ledger: {len(workload.deleted_users)} tombstones, {backlog.pending} "
            f"still pending, {backlog.missed_deadlines} past the "
            f"{tc.max_compaction_lag_ms // 1000}s deadline (vacuum removes the old files "
            f"within {tc.vacuum_grace_ms / 1000:.0f}s)")
        ok = (latest_ok and closed_ok and erased_ok and rejected.num_rows == workload.null_keys
              and backlog.missed_deadlines == 0)
    say()
    say(f"Done in {time.monotonic() - began:.0f}s. The lake is plain Delta; read it with "
        "deltalake, DuckDB or Polars:")
    say(f"  python -c \"import deltalake; print(deltalake.DeltaTable('{paths.log}')"
        ".to_pyarrow_dataset().count_rows())\"")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_demo(sys.argv[1] if len(sys.argv) > 1 else "compactor-demo"))
