"""One micro-batch over many topics: every topic's commit, or none when one topic is fenced.

Real Delta tables on disk, through the product's own plan / append / commit path; no broker.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.config import build_config, with_topic_configs
from compactor.exceptions import DataLossError
from compactor.ingest.writer import commit_ranges
from compactor.lake import fencing
from compactor.lake.fencing import FencedError
from compactor.lake.layout import topic_paths
from compactor.lake.storage import LOCAL
from compactor.positions import INGEST
from tests.lake import append, log_rows

TOPICS = [f"t{i:02d}" for i in range(12)]


def test_a_batch_commits_every_topic_and_a_fenced_topic_stops_it_before_any_commit(
        tmp_path: Path) -> None:
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": ",".join(TOPICS),
        "lake.path": str(tmp_path)}), {})
    now_ms = int(time.time() * 1000)
    logs = {t: topic_paths(config.lake_path, t).log for t in TOPICS}
    first = [r for i, t in enumerate(TOPICS) for p in (0, 1)
             for r in append(config, t, p, [(o, b"k%d" % o, b"v%d" % i, now_ms)
                                            for o in range(3)], now_ms, commit=False)]
    generations = {t: fencing.claim(logs[t], LOCAL) for t in TOPICS}
    stats = commit_ranges(config, first, generations)
    assert sorted(stats) == TOPICS
    assert all(s.records == 6 and s.next_offsets == {0: 3, 1: 3} for s in stats.values())
    for i, t in enumerate(TOPICS):
        assert not [p.name for p in (Path(logs[t]) / "_delta_log").iterdir()
                    if p.name.endswith(".tmp")]
        assert log_rows(config, t) == [(p, o, b"k%d" % o, b"v%d" % i, None)
                                       for p in (0, 1) for o in range(3)]

    fencing.claim(logs["t05"], LOCAL)  # another run took t05 over
    second = [r for t in TOPICS for r in append(config, t, 0, [(3, b"k3", b"new", now_ms)],
                                                now_ms, commit=False)]
    with pytest.raises(FencedError, match="t05"):
        commit_ranges(config, second, generations)
    for t in TOPICS:  # nothing of the batch: the next run reads it again from the lake
        table = DeltaTable(logs[t])
        assert (INGEST.read(table, 0), INGEST.read(table, 1)) == (2, 2)
        assert len(log_rows(config, t)) == 6
        assert not [p.name for p in (Path(logs[t]) / "_delta_log").iterdir()
                    if p.name.endswith(".tmp")]  # no commit written ahead is left


def test_the_last_check_runs_with_every_commit_staged_and_its_error_commits_nothing(
        tmp_path: Path) -> None:
    """The topic-id check of a micro-batch (asked while the commits are staged) is awaited
    before any commit lands; a recreated topic then leaves every log as it was."""
    config = with_topic_configs(build_config({
        "bootstrap.servers": "127.0.0.1:9", "topics": "a,b", "lake.path": str(tmp_path)}), {})
    now_ms = int(time.time() * 1000)
    logs = {t: topic_paths(config.lake_path, t).log for t in ("a", "b")}
    for t in logs:
        append(config, t, 0, [(0, b"k", b"v", now_ms)], now_ms)
    batch = [r for t in logs for r in append(config, t, 0, [(1, b"k", b"w", now_ms)], now_ms,
                                                commit=False)]
    seen: list[list[str]] = []

    def recreated() -> None:
        seen.append(sorted(p.name for t in logs for p in (Path(logs[t]) / "_delta_log").iterdir()
                           if p.name.endswith(".tmp")))
        raise DataLossError("topic 'b' was deleted and recreated")

    with pytest.raises(DataLossError, match="recreated"):
        commit_ranges(config, batch, None, recreated)
    assert len(seen) == 1 and len(seen[0]) == 2  # both commits were staged when it ran
    for t in logs:
        assert INGEST.read(DeltaTable(logs[t]), 0) == 0
        assert len(log_rows(config, t)) == 1
        assert not [p for p in (Path(logs[t]) / "_delta_log").iterdir()
                    if p.name.endswith(".tmp")]
    assert sorted(commit_ranges(config, batch, None, lambda: None)) == ["a", "b"]
    assert all(len(log_rows(config, t)) == 2 for t in logs)
