"""``compactor demo``: the whole product on one machine with nothing but the install."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.cleaner.maintenance import PassReport
from compactor.config import build_config
from compactor.demo.avro_profiles import AvroProfiles
from compactor.demo.broker import EmbeddedBroker
from compactor.demo.picture import Timeline, render
from compactor.demo.schema_registry import EmbeddedSchemaRegistry
from compactor.demo.workload import ProfileWorkload, Record, live_changes, produce, profile_workload
from compactor.erasure.ledger import ErasureLedger
from compactor.exceptions import ConfigError
from compactor.ingest.batch_stats import BatchStats
from compactor.kafka.clients import with_logger
from compactor.lake.layout import read_table, topic_paths
from compactor.lake.segments import read_partition_logs
from compactor.ops.engine import Engine, load_engine
from compactor.ops.status import broker_end_offsets, collect_status

TOPIC = "users"
PARTITIONS = 3
MARKER = ".compactor-demo"
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1024 * 1024),
    "min.cleanable.dirty.ratio": "0.5",
    # The erasure deadline: long enough for Spark's cold start on 2 cores, the first catch-up
    # of 200k Avro records, a cleaning pass and the vacuum grace (M/4), so the demo can keep it
    # for the tombstones produced before Spark started; the ledger counts misses. A shorter
    # one missed it on a newcomer's first run (cold disk caches, no class-data archive).
    "max.compaction.lag.ms": "90000",
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


@contextlib.contextmanager
def logs_to(path: Path, verbose: bool) -> Iterator[None]:
    """Send every log line to ``path``: this process's (its logging writes to stderr) and its
    children's (Spark's JVM and Python workers inherit the file descriptor), so the terminal
    shows only the story on stdout. ``verbose`` leaves stderr alone."""
    if verbose:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as log_file:
        os.dup2(log_file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def run_demo(directory: str, users: int = 20_000, updates: int = 200_000,
             live_seconds: float = 10.0, verbose: bool = False) -> int:
    """Start a broker, produce, mirror, keep changing, verify and draw; returns the exit code."""
    out = Path(directory).resolve()
    _prepare(out)
    if not verbose:
        say(f"(logs of Spark, the Kafka clients and the compactor: {out / 'demo.log'}; "
            "--verbose shows them here)")
    with logs_to(out / "demo.log", verbose):
        return _run(out, users, updates, live_seconds)


def _run(out: Path, users: int, updates: int, live_seconds: float) -> int:
    lake = out / "lake"
    began = time.monotonic()
    began_ms = int(time.time() * 1000)
    say(f"[1/6] starting the embedded Kafka-compatible broker (Tansu), log in {out}/broker.log, "
        "and an embedded Schema Registry")
    with EmbeddedBroker(out / "broker.log") as broker, EmbeddedSchemaRegistry() as registry:
        say(f"      listening on {broker.bootstrap_servers}; registry at {registry.url}")
        admin = AdminClient(with_logger({"bootstrap.servers": broker.bootstrap_servers}))
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config=TOPIC_CONFIG)])[TOPIC].result()
        del admin
        settings = ", ".join(f"{k}={v}" for k, v in TOPIC_CONFIG.items())
        say(f"[2/6] topic '{TOPIC}': {PARTITIONS} partitions, {settings}")
        avro = AvroProfiles(registry.url, TOPIC)
        t0 = time.monotonic()
        workload = avro.workload(profile_workload(users, updates, PARTITIONS,
                                                  start_ms=int(time.time() * 1000)))
        produce(broker.bootstrap_servers, TOPIC, workload.records,
                progress=lambda i: say(f"      produced {i:,} records"))
        say(f"      produced {len(workload.records):,} records for {users:,} users in "
            f"{time.monotonic() - t0:.1f}s: profile updates, {len(workload.deleted_users):,} "
            f"GDPR deletions (tombstones), {workload.null_keys} records with no key; values "
            f"are Avro (schema subject {TOPIC}-value)")

        config = build_config({
            "bootstrap.servers": broker.bootstrap_servers,
            "topics": TOPIC,
            "lake.path": str(lake),
            "checkpoint.path": str(out / "checkpoints"),
            "max.offsets.per.trigger": "80000",
            "trigger.interval.ms": "1000",
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            "key.format": "string",
            "value.format": "avro",
            "schema.registry.url": registry.url,
        })
        say(f"[3/6] mirroring into {topic_paths(str(lake), TOPIC).log} with Spark "
            "(local[2], a write task per core)")
        service = load_engine(config)
        service.install_signal_handlers()
        timeline = Timeline(service.config, TOPIC, started_ms=began_ms)
        t0 = time.monotonic()
        live = threading.Event()  # set once the live phase began: quieter output

        def on_batch(batch_id: int, stats: Mapping[str, BatchStats]) -> None:
            timeline.sample()
            if not live.is_set():
                s = stats[TOPIC]
                say(f"      micro-batch {batch_id}: {s.records:,} records into {s.files} "
                    f"segment files, {s.rejected} rejected")

        def on_pass(report: PassReport) -> None:
            timeline.mark_pass(report)
            if live.is_set():
                return
            if len(timeline.passes) == 1 and report.cleaned:
                say(f"      mirrored {len(workload.records) - workload.null_keys:,} records "
                    f"in {time.monotonic() - t0:.1f}s including Spark start-up")
                say("[4/6] cleaning with Kafka's log cleaner rules (dirty ratio above "
                    f"{TOPIC_CONFIG['min.cleanable.dirty.ratio']}, active segment untouched)")
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
        say(f"      {summary.cleaning.partitions_cleaned} partitions cleaned in "
            f"{summary.cleaning.passes} passes")
        live.set()
        changes = _live_phase(service, broker.bootstrap_servers, workload, users, timeline,
                              live_seconds, on_batch, on_pass, avro)
        ok = _check(service, workload, changes, timeline, out)
        ok = _sql(service, workload, changes) and ok
        service.close()  # Spark and every Kafka client end before the broker does
    say()
    say(f"Done in {time.monotonic() - began:.0f}s. The lake is plain Delta; read it with "
        "deltalake, DuckDB or Polars:")
    say(f"  python -c \"import deltalake; print(deltalake.DeltaTable('"
        f"{topic_paths(str(lake), TOPIC).log}').to_pyarrow_dataset().count_rows())\"")
    return 0 if ok else 1


def _live_phase(
    service: Engine, bootstrap: str, workload: ProfileWorkload, users: int,
    timeline: Timeline, seconds: float,
    on_batch: Callable[[int, Mapping[str, BatchStats]], None],
    on_pass: Callable[[PassReport], None], avro: AvroProfiles,
) -> list[Record]:
    """Keep changing the topic while the mirror runs, then wait until the mirror has read every
    tombstone and every erasure is done (:func:`settled`).

    Returns the records produced. The wait is bounded by the erasure deadline: past it the
    ledger counts a missed deadline and the demo fails.
    """
    tc = service.config.topic(TOPIC)
    say(f"[5/6] live: users keep changing for {seconds:.0f}s (about 150 updates and 4 GDPR "
        "erasures a second) while the mirror runs; then it waits until every tombstone is read "
        "and every erasure is done")
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            service.run(once=False, on_batch=on_batch, on_pass=on_pass)
        except BaseException as exc:  # re-raised by the main thread
            failures.append(exc)

    runner = threading.Thread(target=serve, name="compactor-demo-service", daemon=True)
    runner.start()
    rng = random.Random(11)
    deleted = set(workload.deleted_users)
    produced: list[Record] = []
    ledger = ErasureLedger(service.config)
    started = time.monotonic()
    last_tombstone_ms = int(time.time() * 1000)
    give_up = float("inf")
    next_report = started + 5
    ends: dict[int, int] | None = None
    while not failures:
        now = time.monotonic()
        if now - started < seconds:
            batch = avro.records(live_changes(
                users, PARTITIONS, frozenset(deleted), rng, updates=150, erasures=4,
                timestamp_ms=int(time.time() * 1000)))
            produce(bootstrap, TOPIC, batch)
            produced.extend(batch)
            deleted.update(r.key for r in batch if r.value is None and r.key is not None)
            last_tombstone_ms = int(time.time() * 1000)
            give_up = time.monotonic() + tc.max_compaction_lag_ms / 1000 + 15
        else:
            timeline.sample()
        if now >= next_report:
            next_report = now + 5
            _report_line(service, now - started)
        if now - started >= seconds:
            if ends is None:  # the workload stopped: everything it wrote is below these
                ends = {p: o for (t, p), o in broker_end_offsets(service.config).items()
                        if t == TOPIC}
            # What the log committed, recorded here too if the mirror's readers have not yet:
            # the ledger then knows how far it has scanned, past the last tombstone.
            ledger.record_tombstones(TOPIC)
            if settled(ledger.read_upto(TOPIC), ends, ledger.backlog(TOPIC).pending):
                break
        if now > give_up:
            say("      some erasures are still pending (or tombstones unread) after their "
                "deadline; stopping")
            break
        time.sleep(max(0.0, 1.0 - (time.monotonic() - now)))
    service.request_stop()
    runner.join(timeout=120)
    if failures:
        raise failures[0]
    say(f"      every erasure finished {time.time() - last_tombstone_ms / 1000:.0f}s after "
        f"the last tombstone (deadline {tc.max_compaction_lag_ms // 1000}s)")
    return produced


def settled(recorded: Mapping[int, int], ends: Mapping[int, int], pending: int) -> bool:
    """Whether every erasure of the live phase is done: the ledger has scanned the log up to
    ``recorded`` (per partition), which covers every offset below the broker's end offsets
    ``ends`` (taken once the workload stopped), and none is pending. No pending erasure alone
    is not enough: a mirror that lags has not recorded the tombstones it has yet to read."""
    return pending == 0 and all(recorded.get(p, -1) >= end - 1
                                for p, end in ends.items() if end > 0)


def _sql(service: Engine, workload: ProfileWorkload, changes: list[Record]) -> bool:
    """Query the typed latest-value table with DuckDB over Arrow, as an analyst would."""
    import duckdb
    from deltalake import DeltaTable

    path = topic_paths(service.config.lake_path, TOPIC).table
    users = DeltaTable(path).to_pyarrow_dataset()  # noqa: F841 - DuckDB finds it by name
    query = ("SELECT country, count(*) AS users, count(*) FILTER (WHERE plan = 'pro') AS pro "
             "FROM users GROUP BY country ORDER BY users DESC, country")
    relation = duckdb.sql(query)
    assert relation is not None  # a SELECT always gives a relation
    rows = relation.fetchall()
    say(f"      SQL on the typed table {path} (DuckDB over Arrow):")
    say(f"        {query}")
    say(f"        {'country':<8}{'users':>8}{'pro':>8}")
    for name, count, pro in rows:
        say(f"        {name:<8}{count:>8,}{pro:>8,}")
    expected = workload.latest
    expected.update((r.key, r.value) for r in changes if r.key is not None)
    live = sum(v is not None for v in expected.values())
    total = int(sum(r[1] for r in rows))
    say(f"      check: one typed row per live user ({live:,}): "
        f"{'OK' if total == live else f'{total:,} rows'}")
    return total == live


def _report_line(service: Engine, elapsed: float) -> None:
    topics, broker_error = collect_status(service.config)
    (status,) = [t for t in topics if t.topic == TOPIC]
    lag = sum(p.lag or 0 for p in status.partitions)
    dirty = max((p.dirty_ratio for p in status.partitions), default=0.0)
    e = status.erasure
    oldest = "-" if e.oldest_pending_age_ms is None else f"{e.oldest_pending_age_ms / 1000:.0f}s"
    say(f"      +{elapsed:>3.0f}s  consumer lag {lag:>5} offsets"
        f"{' (broker: ' + broker_error + ')' if broker_error else ''}, max dirty ratio "
        f"{dirty:.2f}, erasures pending {e.pending} (oldest {oldest}), past deadline "
        f"{e.missed_deadlines}")


def _check(service: Engine, workload: ProfileWorkload, changes: list[Record],
           timeline: Timeline, out: Path) -> bool:
    """Compare the lake with what was produced, then draw the run (the demo's step 6)."""
    from deltalake import DeltaTable

    say("[6/6] what the lake holds")
    tc = service.config.topic(TOPIC)
    paths = topic_paths(service.config.lake_path, TOPIC)
    log_table = DeltaTable(paths.log)
    logs = read_partition_logs(log_table)
    table = read_table(log_table, columns=["partition", "segment", "offset", "key", "value"])
    say("      partition  segments   records  offsets           cleaned below")
    clean_ok = True
    for p in range(PARTITIONS):
        rows = table.filter(pc.equal(table.column("partition"), p))
        offsets = rows.column("offset").to_pylist()
        checkpoint = logs[p].cleaner_offset or 0
        say(f"      {p:>9}  {len(logs[p].segments):>8}  {rows.num_rows:>8}  "
            f"{f'{min(offsets)}..{max(offsets)}':<16}  {checkpoint}")
        cleaned = [k for k, o in zip(rows.column("key").to_pylist(), offsets, strict=True)
                   if o < checkpoint]
        clean_ok = clean_ok and len(cleaned) == len(set(cleaned))
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
    expected.update((r.key, r.value) for r in changes if r.key is not None)
    erased_keys = workload.deleted_users | {r.key for r in changes
                                            if r.value is None and r.key is not None}
    # A tombstone past delete.retention.ms has vanished, as in Kafka: absent equals deleted.
    latest_ok = ({k: v for k, (_, v) in latest.items() if v is not None}
                 == {k: v for k, v in expected.items() if v is not None})
    say(f"      check: the latest value of all {len(expected):,} keys is in the lake: "
        f"{'OK' if latest_ok else 'MISMATCH'}")
    say(f"      check: the cleaned part of each partition holds one record per key: "
        f"{'OK' if clean_ok else 'MISMATCH'}")
    mirrored = len(workload.records) - workload.null_keys + len(changes)
    say(f"      {table.num_rows:,} records remain of {mirrored:,} mirrored")
    erased = pc.is_in(table.column("key"), pa.array(sorted(erased_keys), pa.binary()))
    leftovers = table.filter(pc.and_(erased, pc.is_valid(table.column("value")))).num_rows
    erased_ok = leftovers == 0
    say(f"      check: no value of the {len(erased_keys)} erased users is left in the log: "
        f"{'OK' if erased_ok else f'{leftovers} LEFT'} (their tombstones go after "
        f"delete.retention.ms={TOPIC_CONFIG['delete.retention.ms']})")
    ledger = ErasureLedger(service.config)
    backlog = ledger.backlog(TOPIC)
    say(f"      erasure ledger: {len(erased_keys)} tombstones, {backlog.pending} still pending, "
        f"{backlog.missed_deadlines} past the {tc.max_compaction_lag_ms // 1000}s deadline "
        f"(vacuum removes the old files within {tc.vacuum_grace_ms / 1000:.0f}s)")
    timeline.sample()
    png, page = render(timeline, ledger.erasures(TOPIC), out)
    say(f"      picture of the run: {png}")
    say(f"                          {page} (open it in a browser)")
    return (latest_ok and clean_ok and erased_ok and rejected.num_rows == workload.null_keys
            and backlog.pending == 0 and backlog.missed_deadlines == 0)


if __name__ == "__main__":
    sys.exit(run_demo(sys.argv[1] if len(sys.argv) > 1 else "compactor-demo"))
