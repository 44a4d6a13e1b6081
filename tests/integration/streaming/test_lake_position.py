"""The lake is the truth: a plan starts at the lake's position, whatever the query's
checkpoint says, and the topic list can change between runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from compactor.lake.layout import topic_paths
from tests.integration.helpers import lake_offsets, recreate_topic, run_once


def _produce(broker, topic: str, first: int, n: int, partitions: int = 2) -> None:
    """Unique keys, so that cleaning drops nothing and every offset stays in the log."""
    produce(broker.bootstrap_servers, topic,
            [Record(b"k%d" % i, b"v%d" % i, i % partitions) for i in range(first, first + n)])


def _offsets(config, topic: str) -> list[tuple[int, int]]:
    return sorted(lake_offsets(topic_paths(config.lake_path, topic).log))


def _every(counts: dict[int, int]) -> list[tuple[int, int]]:
    return sorted((p, o) for p, n in counts.items() for o in range(n))


def _drop_commits_from_last_ingest(log_path: str) -> int:
    """Remove the newest commit that moved an ingest position, and every commit after it:
    the lake as restored from a copy taken one micro-batch earlier. Returns how many went."""
    commits = sorted(Path(log_path, "_delta_log").glob("*.json"))
    for i in range(len(commits) - 1, -1, -1):
        actions = [json.loads(line) for line in commits[i].read_text().splitlines() if line]
        if any(a.get("txn", {}).get("appId", "").startswith("compactor-ingest-")
               for a in actions):
            for commit in commits[i:]:
                commit.unlink()
            return len(commits) - i
    raise AssertionError("no ingest commit")


@pytest.mark.usefixtures("spark")
def test_a_lake_restored_one_commit_old_reads_the_lost_offsets_again(
        broker, topic_factory, lake_config) -> None:
    topic = topic_factory(2)
    config = lake_config(topic)
    _produce(broker, topic, 0, 100)
    run_once(config)
    _produce(broker, topic, 100, 60)
    run_once(config)
    assert _drop_commits_from_last_ingest(topic_paths(config.lake_path, topic).log) >= 1
    assert len(_offsets(config, topic)) == 100  # offsets 50..79 of each partition are gone

    _produce(broker, topic, 160, 40)
    run_once(config)
    assert _offsets(config, topic) == _every({0: 100, 1: 100})


@pytest.mark.usefixtures("spark")
@pytest.mark.parametrize("new_records", [160, 20], ids=["longer", "shorter"])
def test_a_recreated_topic_mirrored_into_a_fresh_folder_starts_at_its_first_offset(
        broker, topic_factory, lake_config, new_records) -> None:
    """The advice a recreated topic gets: move L/T aside. The query's checkpoint still holds
    the old topic's offsets (50 a partition); the new topic is mirrored from offset 0."""
    topic = topic_factory(1)
    config = lake_config(topic)
    _produce(broker, topic, 0, 50, partitions=1)
    run_once(config)
    recreate_topic(broker, topic_factory, topic, new_records)
    shutil.move(str(Path(config.lake_path) / topic), str(Path(config.lake_path) / "aside"))
    run_once(config)
    assert _offsets(config, topic) == _every({0: new_records})


@pytest.mark.usefixtures("spark")
def test_topics_removed_from_the_list_and_added_back_keep_their_lake(
        broker, topic_factory, lake_config) -> None:
    kept, dropped = topic_factory(2), topic_factory(2)
    both = lake_config(f"{kept},{dropped}")
    _produce(broker, kept, 0, 20)
    _produce(broker, dropped, 0, 20)
    run_once(both)

    _produce(broker, kept, 20, 20)
    _produce(broker, dropped, 20, 20)
    run_once(lake_config(kept))  # the same checkpoint, one topic fewer
    assert _offsets(both, kept) == _every({0: 20, 1: 20})
    assert _offsets(both, dropped) == _every({0: 10, 1: 10})  # left as it was

    run_once(both)  # back on the list: it goes on from its lake's position
    assert _offsets(both, dropped) == _every({0: 20, 1: 20})
    assert _offsets(both, kept) == _every({0: 20, 1: 20})
