"""Which files a pass consolidates: closed segments whole, the active one's small-file runs."""

from __future__ import annotations

from compactor.cleaner.consolidation import ACTIVE_MERGE_FILES, ACTIVE_SMALL_BYTES, merge_runs
from compactor.lake.segments import DataFile, Segment


def _file(first: int, size: int = 1000) -> DataFile:
    return DataFile(f"f{first}", 0, 0, first, first, 1, 10, size, 0, 0, None)


def _seg(base: int, firsts: list[int], size: int = 1000) -> Segment:
    return Segment(0, base, tuple(_file(o, size) for o in reversed(firsts)))


def test_a_closed_segment_of_several_files_becomes_one_in_offset_order() -> None:
    closed, single = _seg(0, [0, 1, 2]), _seg(3, [3])
    [run] = merge_runs([closed, single], active=None)
    assert run.segment == 0 and [f.first_offset for f in run.files] == [0, 1, 2]


def test_the_active_segment_waits_for_enough_small_files() -> None:
    few = _seg(0, list(range(ACTIVE_MERGE_FILES - 1)))
    assert merge_runs([few], active=few) == []
    many = _seg(0, list(range(ACTIVE_MERGE_FILES)))
    [run] = merge_runs([many], active=many)
    assert len(run.files) == ACTIVE_MERGE_FILES


def test_a_large_file_splits_the_active_segments_runs_and_stays() -> None:
    files = [_file(o) for o in range(10)] + [_file(10, ACTIVE_SMALL_BYTES)] + [
        _file(o) for o in range(11, 11 + ACTIVE_MERGE_FILES)]
    active = Segment(0, 0, tuple(files))
    runs = merge_runs([active], active=active)
    assert [(r.files[0].first_offset, r.files[-1].first_offset) for r in runs] == [
        (0, 9), (11, 10 + ACTIVE_MERGE_FILES)]
