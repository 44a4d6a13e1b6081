"""Fault injection: ``compactor run`` killed again and again while producers write.

A producer keeps writing updates and tombstones; ``compactor run`` (a real process, real
Spark, real Delta) is killed after a random stretch of work, each kill aimed in turn at any
moment, at an ingest or cleaning commit whose files are written but not committed, at a
downstream delete in the same state, or at a vacuum deleting files, with SIGKILL or with the
graceful SIGTERM and SIGINT at the same moments (which must exit 0 and be as safe). After every
kill the lake is checked against what was produced (the reference model: the topic itself),
and a line saying what the kill aimed at and what was checked is appended to ``FAULT_REPORT``
(default ``faults.log`` in the test's directory), so a hunt stopped early still says what it
proved. At the end a clean run must leave every erasure done by its deadline. ``FAULT_KILLS``
sets the number of kills (4 in CI: every aim, every signal).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake

from compactor.config import build_config, resolve_config
from compactor.demo.workload import Record, partition_for, produce
from compactor.erasure.ledger import ErasureLedger
from compactor.lake.segments import read_partition_logs
from compactor.ops.status import collect_status
from tests.conftest import overrides_for, wait_until

PARTITIONS = 2
KEYS = 150
M = 60_000  # max.compaction.lag.ms


@dataclass
class Report:
    kills: int = 0
    mid_commit: int = 0  # kills while uncommitted data files were on disk
    hits: dict[str, int] = field(default_factory=dict)  # aim -> kills that caught it
    restarts: int = 0
    checks: int = 0
    records_checked: int = 0
    lost: list[str] = field(default_factory=list)
    # [kill, first commit of the next run] in epoch ms: nothing of the mirror runs then.
    downtime: list[tuple[int, int]] = field(default_factory=list)

    def down_between(self, start_ms: int, end_ms: int) -> int:
        return sum(max(0, min(b, end_ms) - max(a, start_ms)) for a, b in self.downtime)


class Producer(threading.Thread):
    """Updates and tombstones of a small key space, remembered per partition in offset order."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.sent: dict[int, list[Record]] = {p: [] for p in range(PARTITIONS)}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rng = random.Random(42)

    def run(self) -> None:
        seq = 0
        try:
            while not self.stop.is_set():
                batch = []
                for _ in range(40):
                    key = b"user-%d" % self.rng.randrange(KEYS)
                    tomb = self.rng.random() < 0.08
                    value = None if tomb else b"value-%d" % seq
                    seq += 1
                    batch.append(Record(key, value, partition_for(key, PARTITIONS),
                                        int(time.time() * 1000)))
                produce(self.bootstrap, self.topic, batch)
                with self.lock:
                    for r in batch:
                        self.sent[r.partition].append(r)
                time.sleep(0.2)
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def _mtime(path: Path) -> float | None:
    """A file's modification time; None once the product removed it (vacuum, the Delta log's
    expired-commit cleanup) between a listing and this look."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def in_flight(table_dir: Path) -> bool:
    """Data files newer than the last Delta commit: a write that has not committed yet."""
    commits = [t for c in (table_dir / "_delta_log").glob("*.json")
               if (t := _mtime(c)) is not None]
    if not commits:
        return False
    last = max(commits)
    return any((t := _mtime(f)) is not None and t > last for f in data_files(table_dir))


def data_files(table_dir: Path) -> list[Path]:
    """Parquet data files, not the Delta log's checkpoints."""
    return [f for f in table_dir.glob("**/*.parquet") if "_delta_log" not in f.parts]


def parquet_count(table_dir: Path) -> int:
    return len(data_files(table_dir))


class Vacuuming:
    """True once the number of data files falls: vacuum is deleting files right now."""

    def __init__(self, table_dir: Path) -> None:
        self.table_dir, self.seen = table_dir, parquet_count(table_dir)

    def __call__(self) -> bool:
        now = parquet_count(self.table_dir)
        fell, self.seen = now < self.seen, now
        return fell


# What each kill aims at, in turn: any moment, the middle of an ingest or cleaning commit
# protocol (files written, not committed), of a downstream delete (its MERGE's files written,
# not committed), or of a vacuum (files being deleted).
AIMS = ("any moment", "log write", "downstream write", "vacuum")
# The signal of each round of aims: the brutal one, and the graceful ones at the same moments
# (systemd's SIGTERM, a terminal's Ctrl-C), which must be as safe.
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, signal.SIGINT)


def _report_line(path: Path, kill: int, aim: str, signum: int, hit: bool,
                 producer: Producer, report: Report) -> None:
    """One line per kill, written as the hunt goes: a run stopped early still says what it
    proved."""
    with producer.lock:
        produced = sum(len(rs) for rs in producer.sent.values())
        tombstones = sum(1 for rs in producer.sent.values() for r in rs if r.value is None)
    # The downtime of the kill before this one (this one's ends when the next run commits).
    down = report.downtime[-2][1] - report.downtime[-2][0] if len(report.downtime) > 1 else 0
    line = (f"kill {kill}: {signal.Signals(signum).name} aimed at {aim}, "
            f"{'caught' if hit else 'missed'}; {produced} records produced, {tombstones} "
            f"tombstones; previous downtime {down / 1000:.1f}s; checks {report.checks}, "
            f"lost or resurrected {len(report.lost)}")
    with path.open("a") as out:
        out.write(line + "\n")


def committed(log_dir: Path) -> dict[int, int | None]:
    if not (log_dir / "_delta_log").exists():
        return {}
    return {p: plog.committed_offset
            for p, plog in read_partition_logs(DeltaTable(str(log_dir))).items()}


@dataclass
class Truth:
    """Per partition, the latest record of every key produced up to an offset, folded in as
    the hunt goes: a check costs the new records and the lake's rows, not the whole run."""

    upto: dict[int, int] = field(default_factory=dict)  # partition -> last offset folded
    latest: dict[int, dict[bytes, tuple[int, bytes | None]]] = field(default_factory=dict)

    def fold(self, producer: Producer, partition: int, committed: int) -> int:
        """Fold the produced records of ``partition`` up to ``committed``; how many."""
        done = self.upto.get(partition, -1)
        with producer.lock:
            new = producer.sent[partition][done + 1:committed + 1]
        latest = self.latest.setdefault(partition, {})
        for i, r in enumerate(new, start=done + 1):
            assert r.key is not None
            latest[r.key] = (i, r.value)
        self.upto[partition] = max(done, committed)
        return len(new)


def check(log_uri: str, producer: Producer, report: Report, truth: Truth) -> None:
    """The lake's log against what was produced, up to the offsets the lake committed."""
    table = DeltaTable(log_uri)
    logs = read_partition_logs(table)
    rows = table.to_pyarrow_dataset().to_table(columns=["partition", "offset", "key", "value"])
    # The broker may hold (and the lake mirror) a batch whose produce() has not returned yet.
    wait_until(lambda: all(len(producer.sent[p]) > (plog.committed_offset or -1)
                           for p, plog in logs.items()), 30, "the producer's bookkeeping")
    report.checks += 1
    for p, plog in logs.items():
        mine = rows.filter(pc.equal(rows.column("partition"), p))
        offsets = mine.column("offset").to_pylist()
        keys, values = mine.column("key").to_pylist(), mine.column("value").to_pylist()
        committed = plog.committed_offset if plog.committed_offset is not None else -1
        assert len(offsets) == len(set(offsets)), f"partition {p}: an offset is duplicated"
        report.records_checked += truth.fold(producer, p, committed)
        with producer.lock:
            produced = producer.sent[p]
            originals = [(produced[o].key, produced[o].value) for o in offsets]
        lake_latest: dict[bytes, tuple[int, bytes | None]] = {}
        for o, k, v, original in zip(offsets, keys, values, originals, strict=True):
            assert (k, v) == original, f"partition {p} offset {o} differs"
            if k not in lake_latest or o > lake_latest[k][0]:
                lake_latest[k] = (o, v)
        for key, (o, v) in truth.latest.get(p, {}).items():
            got = lake_latest.get(key)
            if v is None:  # a tombstone: it, or nothing once its horizon passed
                if got is not None and got != (o, None):
                    report.lost.append(f"p{p} {key!r}: tombstone {o} but lake has {got}")
            elif got != (o, v):
                report.lost.append(f"p{p} {key!r}: latest {o} but lake has {got}")
        clean_below = plog.cleaner_offset or 0
        cleaned = [k for o, k in zip(offsets, keys, strict=True) if o < clean_below]
        assert len(cleaned) == len(set(cleaned)), f"partition {p}: cleaned part repeats a key"


@pytest.mark.slow
@pytest.mark.faults
def test_sigkill_at_random_moments_loses_and_resurrects_nothing(
        broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(PARTITIONS, {
        "cleanup.policy": "compact", "segment.bytes": "4000", "min.cleanable.dirty.ratio": "0.2",
        "delete.retention.ms": "3000", "max.compaction.lag.ms": str(M)})
    lake = tmp_path / "lake"
    # A downstream table with a row per user: each tombstone must delete that user's row.
    marts = tmp_path / "marts" / "profiles"
    write_deltalake(str(marts), pa.table({"user_id": [f"user-{k}" for k in range(KEYS)],
                                          "plan": ["free"] * KEYS}), configuration={
        "delta.dataSkippingStatsColumns": "plan",
        "delta.deletedFileRetentionDuration": "interval 1 seconds"})
    conf = tmp_path / "c.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in {
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(lake), "checkpoint.path": str(tmp_path / "ck"),
        "trigger.interval.ms": "300", "log.cleaner.backoff.ms": "500",
        "spark.master": "local[2]", "spark.ui.enabled": "false",
        "downstream.profiles.path": str(marts), "downstream.profiles.topic": topic,
        "downstream.profiles.key.column": "user_id", "downstream.profiles.stats.columns": "plan",
        **overrides_for(topic)}.items()))
    log_dir = lake / topic / "log"
    rng = random.Random(int(os.environ.get("FAULT_SEED", "7")))
    report = Report()
    truth = Truth()
    producer = Producer(broker.bootstrap_servers, topic)
    producer.start()
    # Four: every aim once, inside the suite's time budget; FAULT_KILLS=6 or more for a
    # longer hunt (the README's runs used 6).
    kills = int(os.environ.get("FAULT_KILLS", "4"))
    lines = Path(os.environ.get("FAULT_REPORT", str(tmp_path / "faults.log")))
    try:
        for attempt in range(kills):
            aim = AIMS[attempt % len(AIMS)]
            # Each round of aims shifts the signals by one: every aim meets every signal.
            signum = SIGNALS[(attempt + attempt // len(AIMS)) % len(SIGNALS)]
            before = committed(log_dir)
            errors = tmp_path / f"run-{report.restarts}.stderr"
            with errors.open("w") as sink:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "compactor.cli", "run", "--config", str(conf)],
                    stdout=subprocess.DEVNULL, stderr=sink)
            report.restarts += 1
            try:
                # Down until the restarted run commits new offsets (a cleaner commit alone
                # does not count: the mirror is not keeping up until it ingests again).
                wait_until(lambda b=before, pr=proc: pr.poll() is not None
                           or committed(log_dir) != b, 180, "an ingest commit of the restart")
                assert proc.poll() is None, errors.read_text()[-3000:]
                if report.downtime:
                    report.downtime[-1] = (report.downtime[-1][0], int(time.time() * 1000))
                time.sleep(rng.uniform(2.0, 12.0))  # let it work: ingest, clean, vacuum
                caught = {"any moment": lambda: True,
                          "log write": lambda: in_flight(log_dir),
                          "downstream write": lambda: in_flight(marts),
                          "vacuum": Vacuuming(log_dir)}[aim]
                # Aimed, not waited for forever: a moment that does not come in 30 s is missed.
                deadline = time.monotonic() + 30
                hit = False
                while proc.poll() is None and time.monotonic() < deadline:
                    if caught():
                        hit = True
                        break
                    time.sleep(0.005)
                report.hits[aim] = report.hits.get(aim, 0) + hit
                report.mid_commit += in_flight(log_dir) or in_flight(marts)
                assert proc.poll() is None, errors.read_text()[-3000:]
            finally:
                os.kill(proc.pid, signum)
                try:
                    code = proc.wait(120)  # a graceful stop ends after the current commit
                except subprocess.TimeoutExpired:
                    os.kill(proc.pid, signal.SIGKILL)
                    code = proc.wait()
                report.kills += 1
                now = int(time.time() * 1000)
                report.downtime.append((now, now))
            if signum != signal.SIGKILL:
                assert code == 0, f"{signal.Signals(signum).name}: exit {code}: " + \
                    errors.read_text()[-3000:]
            check(str(log_dir), producer, report, truth)
            _report_line(lines, report.kills, aim, signum, hit, producer, report)
    finally:
        producer.stop.set()
        producer.join(60)
    assert producer.error is None, producer.error
    last_tombstone_ms = max(r.timestamp_ms or 0 for rs in producer.sent.values() for r in rs
                            if r.value is None)

    # A clean run after the last kill: catch up, then keep running until every erasure is done.
    proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    report.restarts += 1
    restarted = int(time.time() * 1000)
    config = build_config({"bootstrap.servers": broker.bootstrap_servers, "topics": topic,
                           "lake.path": str(lake), "downstream.profiles.path": str(marts),
                           "downstream.profiles.topic": topic,
                           "downstream.profiles.key.column": "user_id",
                           "downstream.profiles.stats.columns": "plan", **overrides_for(topic)})
    ledger = ErasureLedger(config)
    waiting: AssertionError | None = None
    try:
        wait_until(lambda: (DeltaTable(str(log_dir)).version() >= 0
                            and {p: (pl.committed_offset or -1) + 1 for p, pl in
                                 read_partition_logs(DeltaTable(str(log_dir))).items()}
                            == {p: len(rs) for p, rs in producer.sent.items()}),
                   180, "the mirror to catch up after the last kill")
        report.downtime[-1] = (report.downtime[-1][0], max(restarted, int(time.time() * 1000)))
        tombstones = sum(1 for rs in producer.sent.values() for r in rs if r.value is None)
        # The same bound the assertions below apply: the deadline plus the time the mirror
        # was dead inside the window (the last restart included), and a margin.
        now_ms = int(time.time() * 1000)
        bound_ms = last_tombstone_ms + M + report.down_between(last_tombstone_ms, now_ms)
        try:
            wait_until(lambda: len(ledger.erasures(topic)) == tombstones
                       and ledger.backlog(topic).pending == 0,
                       bound_ms / 1000 - time.time() + 30,
                       f"every erasure ({tombstones} tombstones)")
        except AssertionError as timeout:
            waiting = timeout  # reported below with what was pending and the run's log
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    if waiting is not None:
        pending = [e for e in ledger.erasures(topic) if e.done_ms is None]
        recorded = {(e.partition, e.offset) for e in ledger.erasures(topic)}
        unrecorded = [(p, o) for p, rs in producer.sent.items() for o, r in enumerate(rs)
                      if r.value is None and (p, o) not in recorded]
        events = ledger._events(topic)
        done = {(e["target"], e["partition"]): e["offset"] for e in events
                if e["event"] == "done"}
        try:
            stuck: object = [(p.partition, p.uncleanable_reason, p.first_dirty_offset)
                             for p in collect_status(resolve_config(config),
                                                     ask_broker=False)[0][0].partitions]
        except Exception as exc:  # the report must not hide the timeout
            stuck = f"status failed: {exc!r}"
        raise AssertionError(
            f"{waiting}; {len(ledger.erasures(topic))} in the ledger, {len(pending)} pending, "
            f"never recorded (partition, offset) {unrecorded[:10]}, "
            f"first pending {[(e.partition, e.offset) for e in pending[:5]]}; last done per "
            f"(target, partition) {done}; (partition, uncleanable reason, first dirty) "
            f"{stuck}; downtime {report.downtime}; the last run's log:\n{stderr[-4000:]}")
    assert proc.returncode == 0, stderr[-3000:]
    check(str(log_dir), producer, report, truth)
    # The deadline binds a running mirror (as KIP-354's binds a running cleaner): an erasure
    # may be late by the time the mirror was dead inside its window, never by more.
    erasures = ledger.erasures(topic)
    late = []
    for e in erasures:
        assert e.done_ms is not None and e.deadline_ms is not None
        allowed = e.deadline_ms + report.down_between(e.tombstone_ms, e.done_ms)
        if e.done_ms > allowed:
            late.append(e.done_ms - allowed)
    past_plain = sum(e.late(int(time.time() * 1000)) for e in erasures)
    print(f"\nfault injection: {report.kills} kills ({report.mid_commit} with uncommitted "
          f"files on disk; aims caught: {report.hits}), {report.restarts} restarts, "
          f"{report.checks} checks of "
          f"{report.records_checked:,} produced records, {len(report.lost)} lost or "
          f"resurrected; {len(erasures)} erasures, {past_plain} past max.compaction.lag.ms, "
          f"{len(late)} past it plus the downtime in their window "
          f"(downtime {sum(b - a for a, b in report.downtime) / 1000:.0f}s in all)")
    assert not report.lost, report.lost[:5]
    erased = {r.key.decode() for rs in producer.sent.values() for r in rs
              if r.value is None and r.key is not None}
    remaining = set(DeltaTable(str(marts)).to_pyarrow_dataset().to_table()
                    .column("user_id").to_pylist())
    assert remaining == {f"user-{k}" for k in range(KEYS)} - erased
    assert ledger.backlog(topic).pending == 0
    assert not late, f"{len(late)} erasures late beyond the downtime, by up to {max(late)} ms"
