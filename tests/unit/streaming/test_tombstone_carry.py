"""When ``compactor run`` carries a micro-batch's tombstones to the erasure ledger: in the gap
after the batch, and before anything else touches the topic's log under the commit lock.

A real lake on disk written through the product's ingest path; the mirror is driven as the
service loop and a batch drive it (no Spark query: only the readers' side is exercised).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from compactor.config import CompactorConfig, build_config, with_topic_configs
from compactor.erasure.tombstones import Carried, TombstoneReaders
from compactor.exceptions import LakeError
from streaming.query import Mirror
from tests.lake import append


def _config(lake: Path) -> CompactorConfig:
    return with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": "a,b", "lake.path": str(lake),
        "table.merge.interval.ms": "10000", "trigger.interval.ms": "2000"}), {})


def _committed(config: CompactorConfig, mirror: Mirror, topic: str, now_ms: int) -> None:
    """A batch's commit of two records and a tombstone, as ``_append`` leaves it."""
    results = append(config, topic, 0, [(0, b"k0", b"v", now_ms), (1, b"k1", b"v", now_ms),
                                        (2, b"k0", None, now_ms)], now_ms)
    mirror._uncarried[topic] = {r.partition: r.tombstones for r in results
                                if r.tombstones is not None}


def _erased(mirror: Mirror, topic: str) -> list[int]:
    return [e.offset for e in mirror.ledger.erasures(topic)]


def test_the_readers_run_in_the_gap_after_a_batch_and_before_a_merge(tmp_path: Path) -> None:
    config = _config(tmp_path)
    now_ms = int(time.time() * 1000)
    mirror = Mirror(None, config)  # type: ignore[arg-type]  # the query is never started
    _committed(config, mirror, "a", now_ms)
    _committed(config, mirror, "b", now_ms)

    mirror.in_batch = True  # a batch runs: it carries them itself before its commit
    mirror.carry_tombstones()
    assert _erased(mirror, "a") == [] and _erased(mirror, "b") == []

    mirror.merge_tables(force=True, topics=["b"])  # a MERGE of b carries b's first
    assert _erased(mirror, "b") == [2] and _erased(mirror, "a") == []

    mirror.in_batch = False  # the gap after the batch
    mirror.carry_tombstones()
    assert _erased(mirror, "a") == [2] and mirror.ledger.read_upto("a") == {0: 2}
    assert mirror._uncarried == {}


def test_readers_that_fail_in_the_gap_are_left_to_the_next_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    config = _config(tmp_path)
    now_ms = int(time.time() * 1000)
    mirror = Mirror(None, config)  # type: ignore[arg-type]  # the query is never started
    _committed(config, mirror, "a", now_ms)
    real = TombstoneReaders.catch_up
    failures = [LakeError("ledger of a: disk full")]

    def flaky(self: TombstoneReaders, topic: str, written: object = None) -> Carried:
        if failures:
            raise failures.pop()
        return real(self, topic, written)  # type: ignore[arg-type]

    monkeypatch.setattr(TombstoneReaders, "catch_up", flaky)
    with caplog.at_level(logging.WARNING, logger="streaming.query"):
        mirror.carry_tombstones()
    assert "disk full" in caplog.text and "next batch runs them again" in caplog.text
    assert _erased(mirror, "a") == [] and set(mirror._uncarried) == {"a"}
    caplog.clear()
    mirror.carry_tombstones()  # the loop's next turns leave them to the batch, silently
    assert caplog.text == "" and _erased(mirror, "a") == []

    with mirror.commit_lock:  # what the next batch does before its commit
        mirror._carry()
    assert _erased(mirror, "a") == [2] and mirror._uncarried == {}
