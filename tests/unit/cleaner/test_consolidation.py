"""Which files a pass consolidates: closed segments whole, the active one's small-file runs."""

from __future__ import annotations

import math
import random

from compactor.cleaner.consolidation import (
    ACTIVE_MERGE_FILES,
    ACTIVE_SMALL_BYTES,
    JOIN_RATIO,
    MergeRun,
    merge_runs,
)
from compactor.lake.segments import DataFile, Segment


def _file(first: int, size: int = 1000, record_bytes: int = 10, last: int | None = None,
          ) -> DataFile:
    return DataFile(f"f{first}", 0, 0, first, first if last is None else last, 1,
                    record_bytes, size, 0, 0, None)


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


def test_a_merged_file_waits_until_the_newer_files_hold_half_its_bytes() -> None:
    newer = [_file(o, record_bytes=100) for o in range(10, 10 + ACTIVE_MERGE_FILES)]
    big = _file(0, record_bytes=JOIN_RATIO * 100 * ACTIVE_MERGE_FILES + 1, last=9)
    active = Segment(0, 0, (big, *newer))
    [run] = merge_runs([active], active=active)
    assert run.files == tuple(newer)  # the merged file is not rewritten for them
    joins = _file(0, record_bytes=JOIN_RATIO * 100 * ACTIVE_MERGE_FILES, last=9)
    active = Segment(0, 0, (joins, *newer))
    [run] = merge_runs([active], active=active)
    assert run.files == (joins, *newer)


def _grow(sizes: list[int]) -> tuple[int, int]:
    """Append files of ``sizes`` record bytes to an active segment one at a time, merging
    what merge_runs says after each; (record bytes rewritten, most files held)."""
    files: list[DataFile] = []
    rewritten = most = 0
    for offset, size in enumerate(sizes):
        files.append(_file(offset, record_bytes=size))
        active = Segment(0, 0, tuple(files))
        for run in merge_runs([active], active=active):
            assert isinstance(run, MergeRun)
            merged = sum(f.record_bytes for f in run.files)
            rewritten += merged
            at = files.index(run.files[0])
            assert files[at:at + len(run.files)] == list(run.files)  # consecutive
            files[at:at + len(run.files)] = [_file(run.files[0].first_offset, record_bytes=merged,
                                                   last=run.files[-1].last_offset)]
        most = max(most, len(files))
    return rewritten, most


def test_records_are_rewritten_a_logarithmic_number_of_times_as_the_segment_grows() -> None:
    """The whole run merged every ACTIVE_MERGE_FILES files rewrote the segment's first file
    again and again: bytes written grew with the square of its files."""
    random.seed(7)
    for sizes in ([200] * 20_000,  # a steady trickle
                  [random.choice([50, 200, 200, 5_000, 400_000]) for _ in range(20_000)]):
        rewritten, most = _grow(sizes)
        total = sum(sizes)
        # A file joins a merge only when it grows by half: at most log1.5 rewrites a record.
        assert rewritten <= total * (1 + math.log(total / min(sizes), 1.5))
        # Files that stop a merge each hold JOIN_RATIO times all newer ones.
        assert most <= ACTIVE_MERGE_FILES + math.log(total / min(sizes), JOIN_RATIO) + 1
