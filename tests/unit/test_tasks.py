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


def test_task_count_follows_cores_then_spark_s_two_options() -> None:
    from compactor.tasks import task_count

    sizes = [100] * 8
    assert task_count(sizes, 2) == 2  # one per core
    assert task_count(sizes, 2, min_tasks=5) == 5  # minPartitions
    assert task_count(sizes, 2, max_size=150) == 6  # maxRecordsPerPartition: 800 / 150
    assert task_count(sizes, 2, min_tasks=50) == 8  # a range is never cut
    assert task_count(sizes, 2, max_size=10) == 8
    assert task_count([], 2) == 1
