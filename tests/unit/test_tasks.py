"""Sharing work out among Spark tasks."""

from compactor.tasks import balanced_groups


def test_ranges_are_grouped_into_one_task_per_core_by_records() -> None:
    sizes = [100, 1, 1, 50, 50, 0, 3]
    groups = balanced_groups(sizes, 2)
    assert len(groups) == 2
    assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
    assert sorted(sum(sizes[i] for i in g) for g in groups) == [102, 103]
    assert balanced_groups([5, 5], 8) == [[0], [1]]  # never more groups than ranges
    assert balanced_groups([0, 0, 0, 0], 2) == [[0, 2], [1, 3]]  # idle ranges share out


def test_task_groups_follow_cores_then_spark_s_two_options() -> None:
    from compactor.tasks import task_groups

    def loads(sizes: list[int], *args: int) -> list[int]:
        return sorted(sum(sizes[i] for i in g) for g in task_groups(sizes, *args))

    sizes = [100] * 8
    assert len(task_groups(sizes, 2)) == 2  # one per core
    assert len(task_groups(sizes, 2, 5)) == 5  # minPartitions
    assert len(task_groups(sizes, 2, 0, 150)) == 8  # maxRecordsPerPartition: no pair fits 150
    assert loads(sizes, 2, 0, 200) == [200] * 4
    assert len(task_groups(sizes, 2, 50)) == 8  # a range is never cut
    assert loads([500, 10, 10], 1, 0, 100) == [10, 10, 500]  # nor a large one
    # Balancing by size alone puts 7+6+6 in one of two groups: the bound asks for a third.
    assert max(loads([7, 7, 6, 6, 6], 1, 0, 16)) <= 16
    assert task_groups([], 2) == []


def test_a_task_pickle_carries_plans_with_the_configs_read_only_mappings() -> None:
    """Plans hold the config's mappingproxies (storage options, registry settings), which
    the standard pickle refuses; a task's blob must bring them back equal and read-only."""
    import pickle
    from types import MappingProxyType

    from compactor.config import build_config
    from compactor.ingest.writer import PartitionPlan
    from compactor.tasks import task_pickle

    config = build_config({"bootstrap.servers": "localhost:9092", "topics": "a",
                           "lake.path": "s3://bucket/lake", "checkpoint.path": "/tmp/checkpoints",
                           "lake.storage.AWS_REGION": "eu-west-1",
                           "schema.registry.url": "http://registry:8081",
                           "value.format": "json", "value.schema": "id BIGINT"})
    plan = PartitionPlan(topic="a", partition=3, start=10, end=12, log_path="l",
                         rejected_path="r", committed_offset=9, rejected_offset=None,
                         active=None, segment_bytes=1024, roll_ms=60_000, compact=True,
                         now_ms=1, storage=config.storage, formats=config.format("a"))
    assert isinstance(plan.storage.options, MappingProxyType)
    [back] = pickle.loads(task_pickle([plan]))
    assert back == plan
    assert isinstance(back.storage.options, MappingProxyType)
    assert dict(back.storage.options) == {"AWS_REGION": "eu-west-1"}
    assert isinstance(back.formats.registry, MappingProxyType)
    assert back.formats.registry["url"] == "http://registry:8081"
