"""The ledger's done index answers as the definition does: the earliest done event covering
an offset."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from compactor.erasure.ledger import DoneIndex

events = st.lists(st.tuples(st.integers(-1, 50), st.integers(0, 1000)), max_size=30)


@given(events, st.lists(st.integers(0, 60), max_size=30))
def test_first_done_at_is_the_earliest_event_covering_the_offset(done, offsets) -> None:
    index = DoneIndex(done)
    for offset in offsets:
        covering = [at for upto, at in done if upto >= offset]
        assert index.first_done_at(offset) == (min(covering) if covering else None)


def test_a_later_event_that_covers_more_does_not_hide_an_earlier_one() -> None:
    # Done up to 10 at t=100, then up to 20 at t=200: offset 5 was done at 100, 15 at 200.
    index = DoneIndex([(20, 200), (10, 100)])
    assert (index.first_done_at(5), index.first_done_at(15), index.first_done_at(21)) == (
        100, 200, None)
