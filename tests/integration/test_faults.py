"""Fault injection: ``compactor run`` killed again and again while producers write.

A producer keeps writing updates and tombstones, part of them in Kafka transactions that
commit or abort; ``compactor run`` (a real process, real Spark, real Delta) is killed after a
random stretch of work, each kill aimed in turn at one of the moments in
:mod:`tests.integration.faults.aims` (start-up, an ingest commit, a cleaning rewrite, the
latest-value MERGE, a downstream MERGE and the erasure ledger's writes with their files on disk
and no commit, a vacuum deleting files, any moment), with SIGKILL or with the graceful SIGTERM
and SIGINT at the same moments (which must exit 0 and be as safe). After every kill the lake
is checked against what was produced (:mod:`tests.integration.faults.truth`), and a line
saying what the kill aimed at and what was checked is appended to ``FAULT_REPORT`` (default
``faults.log`` in the test's directory), so a hunt stopped early still says what it proved. At
the end a clean run must leave every erasure done by its deadline. ``FAULT_KILLS`` sets the
number of kills (one per aim in CI).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from compactor.config import build_config, resolve_config
from compactor.erasure.ledger import ErasureLedger
from compactor.lake.segments import read_partition_logs
from compactor.ops.status import collect_status
from tests.conftest import TEST_BROKER, overrides_for, wait_until
from tests.integration.faults.aims import AIMS, in_flight, probe
from tests.integration.faults.erasures import ErasureWatch
from tests.integration.faults.producer import USERS, Producer
from tests.integration.faults.truth import Report, Truth, check, committed
from tests.integration.helpers import created

PARTITIONS = 2
M = 60_000  # max.compaction.lag.ms
FILLER = 300_000  # downstream rows besides the users': each erasure rewrites them, slowly
# The signal of each round of aims: the brutal one, and the graceful ones at the same moments
# (systemd's SIGTERM, a terminal's Ctrl-C), which must be as safe.
SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGKILL, signal.SIGINT)


def _report_line(path: Path, kill: int, aim: str, signum: int, hit: bool,
                 producer: Producer, report: Report) -> None:
    """One line per kill, written as the hunt goes: a run stopped early still says what it
    proved."""
    produced, tombstones, aborted = producer.produced()
    # The downtime of the kill before this one (this one's ends when the next run commits).
    down = report.downtime[-2][1] - report.downtime[-2][0] if len(report.downtime) > 1 else 0
    line = (f"kill {kill}: {signal.Signals(signum).name} aimed at {aim}, "
            f"{'caught' if hit else 'missed'}; {produced} records produced, {tombstones} "
            f"tombstones, {aborted} aborted; previous downtime {down / 1000:.1f}s; checks "
            f"{report.checks}, lost or resurrected {len(report.lost)}"
            + (f" (first: {report.lost[:3]})" if report.lost else ""))
    with path.open("a") as out:
        out.write(line + "\n")


def _work_then_aim(aim: str, proc: subprocess.Popen[bytes], before: dict[int, int | None],
                   topic_dir: Path, downstream: Path, rng: random.Random, report: Report,
                   errors: Path) -> bool:
    """Wait for the run's first ingest commit, let it work a while, then watch for the moment
    ``aim`` names; whether it came (a moment that does not come in 20 s is missed)."""
    log_dir = topic_dir / "log"
    # Down until the restarted run commits new offsets (a cleaner commit alone does not
    # count: the mirror is not keeping up until it ingests again).
    wait_until(lambda: proc.poll() is not None or committed(log_dir) != before, 180,
               "an ingest commit of the restart")
    assert proc.poll() is None, errors.read_text()[-3000:]
    if report.downtime:
        report.downtime[-1] = (report.downtime[-1][0], int(time.time() * 1000))
    # Let it work (ingest, clean, vacuum): up to FAULT_WORK_S seconds, 4 by default.
    time.sleep(rng.uniform(1.0, float(os.environ.get("FAULT_WORK_S", "4"))))
    now = probe(aim, topic_dir, downstream)
    deadline = time.monotonic() + 20
    while proc.poll() is None and time.monotonic() < deadline:
        if now():
            return True
        time.sleep(0.005)
    return False


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
    # A row per user among many others, in one file: each erasure rewrites it, so a kill can
    # land inside a downstream MERGE.
    users = [f"user-{k}" for k in range(USERS)]
    write_deltalake(str(marts), pa.table({
        "user_id": users + [f"other-{k}" for k in range(FILLER)],
        "plan": ["free"] * (USERS + FILLER)}), configuration={
        "delta.dataSkippingStatsColumns": "plan",
        "delta.deletedFileRetentionDuration": "interval 1 seconds"})
    conf = tmp_path / "c.properties"
    conf.write_text("".join(f"{k}={v}\n" for k, v in {
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(lake), "checkpoint.path": str(tmp_path / "ck"),
        "trigger.interval.ms": "300", "log.cleaner.backoff.ms": "500",
        "spark.master": "local[2]", "spark.ui.enabled": "false",
        # Short enough that runs prune the erasure ledger, so kills meet its prunes.
        "erasure.ledger.retention.ms": "20000",
        "downstream.profiles.path": str(marts), "downstream.profiles.topic": topic,
        "downstream.profiles.key.column": "user_id", "downstream.profiles.stats.columns": "plan",
        **overrides_for(topic)}.items()))
    topic_dir = lake / topic
    log_dir = topic_dir / "log"
    rng = random.Random(int(os.environ.get("FAULT_SEED", "7")))
    report = Report()
    truth = Truth()
    config = build_config({"bootstrap.servers": broker.bootstrap_servers, "topics": topic,
                           "lake.path": str(lake), "downstream.profiles.path": str(marts),
                           "downstream.profiles.topic": topic,
                           "downstream.profiles.key.column": "user_id",
                           "downstream.profiles.stats.columns": "plan", **overrides_for(topic)})
    ledger = ErasureLedger(config)
    watch = ErasureWatch(ledger, topic, PARTITIONS)
    # Part of the records inside transactions (Apache Kafka; Tansu's are not exercised here).
    producer = Producer(broker.bootstrap_servers, topic, PARTITIONS,
                        transactions=TEST_BROKER == "kafka")
    producer.start()
    # Every aim once in CI; FAULT_KILLS=32 meets every aim with every signal, the soak more.
    kills = int(os.environ.get("FAULT_KILLS", str(len(AIMS))))
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
                report.aimed[aim] = report.aimed.get(aim, 0) + 1
                if aim == "start-up":
                    # Somewhere between the process's start and its first ingest commit.
                    time.sleep(rng.uniform(0.5, 8.0))
                    hit = proc.poll() is None and committed(log_dir) == before
                else:
                    hit = _work_then_aim(aim, proc, before, topic_dir, marts, rng, report,
                                         errors)
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
            if created(log_dir):
                check(str(log_dir), producer, report, truth)
                watch.look()
            _report_line(lines, report.kills, aim, signum, hit, producer, report)
    finally:
        producer.stop.set()
        producer.join(60)
    assert producer.error is None, producer.error
    last_tombstone_ms = max(r.timestamp_ms for rs in producer.sent.values()
                            for r in rs.values() if r.value is None)
    last_visible = {p: max(rs) for p, rs in producer.sent.items()}

    # A clean run after the last kill: catch up, then keep running until every erasure is done.
    final = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config", str(conf)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    report.restarts += 1
    restarted = int(time.time() * 1000)
    waiting: AssertionError | None = None
    try:
        wait_until(lambda: (DeltaTable(str(log_dir)).version() >= 0
                            and all((pl.committed_offset or -1) >= last_visible[p] for p, pl in
                                    read_partition_logs(DeltaTable(str(log_dir))).items())),
                   180, "the mirror to catch up after the last kill")
        report.downtime[-1] = (report.downtime[-1][0], max(restarted, int(time.time() * 1000)))
        # The same bound the assertions below apply: the deadline plus the time the mirror
        # was dead inside the window (the last restart included), and a margin.
        now_ms = int(time.time() * 1000)
        bound_ms = last_tombstone_ms + M + report.down_between(last_tombstone_ms, now_ms)
        try:
            wait_until(lambda: watch.settled(last_visible), bound_ms / 1000 - time.time() + 30,
                       "every erasure recorded and finished")
        except AssertionError as timeout:
            waiting = timeout  # reported below with what was pending and the run's log
    finally:
        final.send_signal(signal.SIGTERM)
        _, stderr = final.communicate(timeout=120)
    if waiting is not None:
        pending = [e for e in ledger.erasures(topic) if e.done_ms is None]
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
            f"{waiting}; positions (scanned, pruned, pruned late) {watch.positions()}, "
            f"{len(pending)} pending, first pending "
            f"{[(e.partition, e.offset) for e in pending[:5]]}; last done per "
            f"(target, partition) {done}; (partition, uncleanable reason, first dirty) "
            f"{stuck}; downtime {report.downtime}; the last run's log:\n{stderr[-4000:]}")
    assert final.returncode == 0, stderr[-3000:]
    check(str(log_dir), producer, report, truth)
    # The deadline binds a running mirror (as KIP-354's binds a running cleaner): an erasure
    # may be late by the time the mirror was dead inside its window, never by more.
    watch.look()
    _, pruned, pruned_late = watch.positions()
    finished = [e for e in watch.seen.values() if e.done_ms is not None]
    unseen_end = [e for e in watch.seen.values()
                  if e.done_ms is None and e.offset > pruned.get(e.partition, -1)]
    assert not unseen_end, f"erasures neither finished nor pruned: {unseen_end[:5]}"
    late = []
    for e in finished:
        assert e.deadline_ms is not None and e.done_ms is not None
        allowed = e.deadline_ms + report.down_between(e.tombstone_ms, e.done_ms)
        if e.done_ms > allowed:
            late.append(e.done_ms - allowed)
    past_plain = sum(e.late(int(time.time() * 1000)) for e in finished)
    tombstones = {(p, o) for p, rs in producer.sent.items() for o, r in rs.items()
                  if r.value is None}
    recorded = {t for t in tombstones if t in watch.seen or t[1] <= pruned.get(t[0], -1)}
    print(f"\nfault injection: {report.kills} kills ({report.mid_commit} with uncommitted "
          f"files on disk; aims caught: {report.hits} of {report.aimed}), "
          f"{report.restarts} restarts, {producer.transactions} transactions, "
          f"{report.checks} checks of "
          f"{report.records_checked:,} produced records, {len(report.lost)} lost or "
          f"resurrected; {len(tombstones)} tombstones, {len(recorded)} recorded as erasures "
          f"(the rest left the topic before the mirror read them: reconciled), "
          f"{len(finished)} seen finished, {past_plain} past max.compaction.lag.ms, "
          f"{len(late)} past it plus the downtime in their window, {pruned_late} pruned late "
          f"(downtime {sum(b - a for a, b in report.downtime) / 1000:.0f}s in all)")
    assert not report.lost, report.lost[:5]
    erased = {r.key.decode() for rs in producer.sent.values() for r in rs.values()
              if r.value is None and r.key is not None}
    remaining = set(DeltaTable(str(marts)).to_pyarrow_dataset().to_table()
                    .column("user_id").to_pylist())
    assert {u for u in remaining if u.startswith("user-")} == set(users) - erased
    assert len(remaining) == len(users) - len(erased) + FILLER, "a row of another key went"
    assert not late, f"{len(late)} erasures late beyond the downtime, by up to {max(late)} ms"
