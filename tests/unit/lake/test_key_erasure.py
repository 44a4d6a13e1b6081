"""Erasing named keys from one partition of the log, without Kafka (the offline ingest path)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

from compactor.lake.commit_files import Conflict
from compactor.lake.key_erasure import erase_keys, lake_keys
from compactor.lake.layout import topic_paths
from compactor.lake.log_follower import log_view
from tests.lake import append, log_rows, offline_config

NOW = 1_700_000_000_000


def _lake(tmp_path: Path) -> tuple:
    config = offline_config(str(tmp_path), "t", cleanup_policy="compact")
    append(config, "t", 0, [(0, b"a", b"1", NOW), (1, b"b", b"2", NOW), (2, b"a", None, NOW),
                            (3, b"c", b"3", NOW)], NOW)
    append(config, "t", 0, [(4, b"a", b"4", NOW), (5, b"c", b"5", NOW)], NOW)
    append(config, "t", 1, [(0, b"a", b"x", NOW)], NOW)
    view = log_view(topic_paths(config.lake_path, "t").log, config.storage)
    return config, view


def test_values_of_the_keys_below_the_bound_go_and_everything_else_stays(tmp_path: Path) -> None:
    config, view = _lake(tmp_path)
    recorded: list[list[bytes]] = []
    done = erase_keys(view, 0, pa.array([b"a", b"c"], pa.binary()), 5, config.storage,
                      threading.Lock(), None, "test", lambda ks: recorded.append(ks.to_pylist()))
    assert done.values == 3  # a@0, c@3, a@4: the tombstone a@2 and c@5 (not below 5) stay
    assert sorted(done.keys.to_pylist()) == [b"a", b"c"]
    assert sorted(recorded[0]) == [b"a", b"c"]
    assert [(p, o, k, v) for p, o, k, v, _ in log_rows(config, "t")] == [
        (0, 1, b"b", b"2"), (0, 2, b"a", None), (0, 5, b"c", b"5"), (1, 0, b"a", b"x")]


def test_nothing_to_erase_commits_nothing(tmp_path: Path) -> None:
    config, view = _lake(tmp_path)
    before = view.version
    done = erase_keys(view, 0, pa.array([b"zzz"], pa.binary()), 99, config.storage,
                      threading.Lock(), None, "test")
    assert (done.values, done.files) == (0, 0)
    assert log_view(view.uri, config.storage).version == before


def test_a_partition_rewritten_meanwhile_refuses_the_erasure(tmp_path: Path) -> None:
    config, stale = _lake(tmp_path)
    erase_keys(stale, 0, pa.array([b"b"], pa.binary()), 99, config.storage, threading.Lock(),
               None, "first")
    with pytest.raises(Conflict):
        erase_keys(stale, 0, pa.array([b"c"], pa.binary()), 99, config.storage,
                   threading.Lock(), None, "second, from the view before the first")


def test_lake_keys_splits_at_the_bound(tmp_path: Path) -> None:
    config, view = _lake(tmp_path)
    early, late = lake_keys(view, 0, 4, config.storage)
    assert sorted(early.to_pylist()) == [b"a", b"b", b"c"]
    assert sorted(late.to_pylist()) == [b"a", b"c"]
