"""The metrics port's probes: liveness follows the query, readiness the ingest commits."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from compactor.config import build_config, with_topic_configs
from compactor.ingest.batch_stats import BatchStats
from compactor.ops.health import serve
from compactor.ops.metrics import Metrics, readiness_bound_s
from tests.integration.helpers import free_port


def _metrics(**extra: str) -> Metrics:
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": "users", "lake.path": "/tmp/unused",
        "cleanup.policy": "compact", **extra}), {})
    return Metrics(config)  # port 0: registered, not served


def test_liveness_follows_the_query() -> None:
    m = _metrics()
    assert m.liveness()[0] is False
    m.alive = lambda: True
    assert m.liveness() == (True, "ok: the mirror query is running")


def test_readiness_needs_a_recent_ingest_commit_or_nothing_left_to_mirror() -> None:
    m = _metrics(**{"trigger.interval.ms": "10000"})
    m.alive = lambda: True
    bound = readiness_bound_s(m._config)
    assert bound == 100.0  # ten triggers of 10 s
    start = m._started
    assert m.readiness(now=start + bound)[0] is True  # starting up
    ok, why = m.readiness(now=start + bound + 1)
    assert not ok and "no ingest commit for 101s (bound 100s)" in why
    m._lag_total = 0  # the last look at the broker found nothing to mirror
    assert m.readiness(now=start + bound + 1)[0] is True
    m._lag_total = 5
    m.on_batch(1, {"users": BatchStats(records=3, record_bytes=30, rejected=0, files=1,
                                       partitions=1)})
    assert m.readiness()[0] is True
    m.alive = lambda: False
    assert m.readiness() == (False, "the mirror query is not running")


def test_the_endpoints_answer_503_with_the_reason() -> None:
    m = _metrics()
    port = free_port()
    server = serve(port, m.registry, m.liveness, m.readiness)
    try:
        for path in ("/healthz", "/readyz"):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5)
            assert info.value.code == 503
            assert info.value.read().decode() == "the mirror query is not running\n"
        m.alive = lambda: True
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert 'compactor_erasure_deadlines_missed_total{topic="users"} 0.0' in text
        assert "compactor_build_info{" in text and "process_resident_memory_bytes" in text
        assert "python_info{" in text and "python_gc_objects_collected_total" in text
    finally:
        server.shutdown()
