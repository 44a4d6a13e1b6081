"""The Prometheus endpoint of a running ``compactor run``, scraped over HTTP."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request

import pytest

from compactor.demo.workload import Record, produce
from tests.conftest import wait_until
from tests.integration.helpers import free_port, write_config


def scrape(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return ""


@pytest.mark.slow
def test_metrics_are_served_while_the_mirror_runs(broker, topic_factory, tmp_path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "600000"})
    produce(broker.bootstrap_servers, topic, [
        Record(b"a", b"1", 0), Record(b"a", None, 0), Record(b"b", b"2", 0)])
    port = free_port()
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "metrics.port": str(port),
        "trigger.interval.ms": "500", "log.cleaner.backoff.ms": "500",
        "spark.master": "local[2]", "spark.ui.enabled": "false"})
    proc = subprocess.Popen([sys.executable, "-m", "compactor.cli", "run", "--config", str(conf)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ingested = f'compactor_records_ingested_total{{topic="{topic}"}} 3.0'
        # The tombstone waits for the log cleaner (its segment is active): one pending.
        backlog = f'compactor_erasure_backlog{{topic="{topic}"}} 1.0'
        caught_up = f'compactor_consumer_lag{{partition="0",topic="{topic}"}} 0.0'

        def ready() -> str:  # lag is refreshed from the broker every few seconds
            text = scrape(port)
            return text if all(s in text for s in (ingested, backlog, caught_up)) else ""

        text = wait_until(ready, 120, "the ingest counter, erasure backlog and a lag of 0")
        for name in ("max_compaction_delay_seconds", "max_dirty_ratio", "cleaner_recopy_ratio",
                     "max_clean_time_seconds", "max_buffer_utilization_ratio",
                     "uncleanable_partitions", "uncleanable_bytes",
                     # the names before, kept one release as deprecated aliases
                     "max_compaction_delay_secs", "max_dirty_percent",
                     "uncleanable_partitions_count"):
            assert f"compactor_{name} " in text, name
        # Prometheus' conventions: base units, no _created series of our counters, and
        # duration histograms of the micro-batch, its commit, the pass and the MERGE.
        assert "compactor_records_ingested_created" not in text
        for name in ("micro_batch", "ingest_commit", "cleaning_pass", "table_merge"):
            assert f"compactor_{name}_duration_seconds_count " in text, name
        assert "compactor_micro_batch_duration_seconds_count 0.0" not in text
        # What an on-call engineer expects beside Kafka's names.
        assert f'compactor_last_ingest_commit_timestamp_seconds{{topic="{topic}"}} ' in text
        assert f'compactor_erasure_deadlines_missed_total{{topic="{topic}"}} 0.0' in text
        assert f'compactor_erasure_deadline_best_effort{{topic="{topic}"}} 0.0' in text
        assert 'compactor_build_info{' in text and "process_resident_memory_bytes " in text
        assert "python_info{" in text
        for probe in ("healthz", "readyz"):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/{probe}", timeout=5) as r:
                assert r.status == 200 and r.read().decode().startswith("ok"), probe
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]


def test_refreshing_reads_only_what_was_committed_since_the_last_refresh(
        broker, topic_factory, tmp_path) -> None:
    """The gauges are refreshed after every cleaning pass of a mirror that runs for months: they
    must match a one-off ``status`` without reading the log or the erasure ledger whole again."""
    import time

    from compactor.config import build_config, with_topic_configs
    from compactor.erasure.ledger import ErasureLedger
    from compactor.lake.layout import topic_paths
    from compactor.lake.log_follower import follow
    from compactor.ops.metrics import Metrics
    from compactor.ops.status import collect_status
    from tests.lake import append

    topic = topic_factory(2, {"cleanup.policy": "compact"})
    config = with_topic_configs(build_config({
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path), "cleanup.policy": "compact",
        "max.compaction.lag.ms": "60000"}), {})
    metrics = Metrics(config)  # port 0: registered, not served
    writer = ErasureLedger(config)
    now = int(time.time() * 1000)
    for batch in range(12):
        append(config, topic, batch % 2, [(batch, b"k%d" % batch, None, now)], now_ms=now)
        writer.record_tombstones(topic)
        if batch % 3 == 2:
            writer.record_done(topic, "log", {0: batch, 1: batch})
        metrics.refresh()
        topics, _ = collect_status(config, ask_broker=False)
        want = topics[0].erasure.pending
        assert metrics.registry.get_sample_value(
            "compactor_erasure_backlog", {"topic": topic}) == want
        dirtiest = max(p.dirty_ratio for p in topics[0].partitions)
        assert metrics.registry.get_sample_value("compactor_max_dirty_ratio") == dirtiest
        assert metrics.registry.get_sample_value("compactor_max_dirty_percent") == pytest.approx(
            100.0 * dirtiest)
    assert want == 12  # the table target has finished nothing
    assert follow(topic_paths(config.lake_path, topic).log, config.storage).full_loads == 1
    assert metrics._ledger._backlogs[topic].full_loads == 1


def test_a_pass_that_committed_nothing_refreshes_the_gauges_at_most_every_few_seconds(
        broker, topic_factory, tmp_path) -> None:
    """A busy mirror runs a pass after every micro-batch: the gauges read every partition of
    every topic, so a pass that cleaned nothing refreshes them only every few seconds, and
    one that committed a cleaning refreshes them at once."""
    import time

    from compactor.cleaner.cleanable import CleanableRange
    from compactor.cleaner.maintenance import PartitionOutcome, PassReport
    from compactor.config import build_config, with_topic_configs
    from compactor.erasure.ledger import ErasureLedger
    from compactor.ops.metrics import Metrics
    from tests.lake import append

    topic = topic_factory(1, {"cleanup.policy": "compact"})
    config = with_topic_configs(build_config({
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path), "cleanup.policy": "compact"}), {})
    metrics = Metrics(config)  # port 0: registered, not served
    ledger = ErasureLedger(config)
    now = int(time.time() * 1000)

    def tombstone(offset: int) -> None:
        append(config, topic, 0, [(offset, b"k%d" % offset, None, now)], now_ms=now)
        ledger.record_tombstones(topic)

    def backlog() -> float | None:
        return metrics.registry.get_sample_value("compactor_erasure_backlog", {"topic": topic})

    tombstone(0)
    metrics.on_pass(PassReport(), {})
    assert backlog() == 1
    tombstone(1)
    metrics.on_pass(PassReport(), {})  # nothing committed, moments after the last refresh
    assert backlog() == 1
    cleaned = PartitionOutcome(topic, 0, CleanableRange(0, 0, 0, 0, 0, 0, None, 0, False, 0.5),
                               None, committed=True)
    metrics.on_pass(PassReport([cleaned]), {})
    assert backlog() == 2
    tombstone(2)
    wait_until(lambda: metrics.on_pass(PassReport(), {}) or backlog() == 3, 30,
               "a pass that committed nothing to refresh the gauges a few seconds later")
