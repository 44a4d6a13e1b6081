"""The caught-up rule of compactor.erasure.source_gap, on its own."""

from __future__ import annotations

from compactor.erasure.source_gap import _Seen, caught_up_time, look_every_ms


def test_the_latest_listing_the_lake_reached_is_the_caught_up_time() -> None:
    seen = [_Seen(1_000, {0: 10, 1: 5}), _Seen(2_000, {0: 20, 1: 5}), _Seen(3_000, {0: 30})]
    assert caught_up_time(seen, {0: 9, 1: 5}) is None
    assert caught_up_time(seen, {0: 10, 1: 5}) == 1_000
    assert caught_up_time(seen, {0: 25, 1: 5}) == 2_000
    assert caught_up_time(seen, {0: 30, 1: 0}) == 3_000  # partition 1's log was empty then


def test_a_partition_the_lake_never_wrote_holds_the_time_back() -> None:
    assert caught_up_time([_Seen(1_000, {0: 10, 1: 1})], {0: 10}) is None


def test_the_look_interval_is_an_eighth_of_delete_retention_within_bounds() -> None:
    assert look_every_ms(86_400_000) == 30_000
    assert look_every_ms(80_000) == 10_000
    assert look_every_ms(100) == 1_000
