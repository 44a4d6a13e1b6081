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
from compactor.layout import topic_paths
from compactor.workload import produce, profile_workload
from compactor.writer import BatchStats

TOPIC = "users"
PARTITIONS = 3
MARKER = ".compactor-demo"
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1024 * 1024),
    "min.cleanable.dirty.ratio": "0.5",
    "max.compaction.lag.ms": "60000",
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
    say(f"[1/4] starting the embedded Kafka-compatible broker (Tansu), log in {out}/broker.log")
    with EmbeddedBroker(out / "broker.log") as broker:
        say(f"      listening on {broker.bootstrap_servers}")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=TOPIC_CONFIG)])[TOPIC].result()
        del admin
        settings = ", ".join(f"{k}={v}" for k, v in TOPIC_CONFIG.items())
        say(f"[2/4] topic '{TOPIC}': {PARTITIONS} partitions, {settings}")
        workload = profile_workload(users, updates, PARTITIONS, start_ms=int(time.time() * 1000))
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
        say(f"[3/4] mirroring into {topic_paths(str(lake), TOPIC).log} with Spark "
            "(local[2], one task per partition)")
        service = Service(config)
        service.install_signal_handlers()
        t0 = time.monotonic()
        def on_batch(batch_id: int, stats: Mapping[str, BatchStats]) -> None:
            s = stats[TOPIC]
            say(f"      micro-batch {batch_id}: {s.records:,} records into {s.files} segment "
                f"files, {s.rejected} rejected")

        summary = service.run(once=True, on_batch=on_batch)
        took = time.monotonic() - t0
        say(f"      mirrored {summary.records:,} records ({summary.record_bytes / 1e6:.1f} MB) in "
            f"{summary.batches} micro-batches, {took:.1f}s including Spark start-up")

        say("[4/4] what the lake holds")
        paths = topic_paths(str(lake), TOPIC)
        table = DeltaTable(paths.log).to_pyarrow_table(
            columns=["partition", "segment", "offset", "key", "value"])
        say("      partition  segments   records  offsets")
        for p in range(PARTITIONS):
            rows = table.filter(pc.equal(table.column("partition"), p))
            offsets = rows.column("offset").to_pylist()
            segs = len(set(rows.column("segment").to_pylist()))
            say(f"      {p:>9}  {segs:>8}  {rows.num_rows:>8}  {min(offsets)}..{max(offsets)}")
        rejected = DeltaTable(paths.rejected).to_pyarrow_table(columns=["offset", "reason"])
        reason = rejected.column("reason")[0].as_py() if rejected.num_rows else ""
        say(f"      rejected: {rejected.num_rows} records ({reason})")
        keyed = len(workload.records) - workload.null_keys
        distinct = len(set(zip(table.column("partition").to_pylist(),
                               table.column("offset").to_pylist(), strict=True)))
        ok = (table.num_rows == keyed and distinct == keyed
              and rejected.num_rows == workload.null_keys)
        say(f"      check: {table.num_rows:,} keyed records in the lake, {keyed:,} produced, "
            f"each offset once: {'OK' if ok else 'MISMATCH'}")
        sample = sorted(workload.deleted_users)[0]
        history = table.filter(pc.equal(table.column("key"), pa.scalar(sample, pa.binary())))
        say(f"      {sample.decode()} was erased: {history.num_rows} versions in the log, "
            "the last a tombstone; compaction will remove the older values")
    say()
    say(f"Done in {time.monotonic() - began:.0f}s. The lake is plain Delta; read it with "
        "deltalake, DuckDB or Polars:")
    say(f"  python -c \"import deltalake; print(deltalake.DeltaTable('{paths.log}')"
        ".to_pyarrow_table().num_rows)\"")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(run_demo(sys.argv[1] if len(sys.argv) > 1 else "compactor-demo"))
