"""Which topics ``compactor run``'s cleaner looks at, and when."""

from __future__ import annotations

from compactor.cleaner.schedule import PassSchedule


def test_a_batch_pass_looks_at_the_topics_it_wrote_and_every_topic_is_looked_at_in_time() -> None:
    passes = PassSchedule(next_full=15.0)  # the backoff after a start at 0
    assert passes.take(1.0) == []  # nothing written, nothing due: no pass

    passes.on_batch(["b", "a"])
    passes.on_batch(["a"])
    assert passes.take(2.0) == ["a", "b"]
    passes.passed(False, wake=17.0)  # the backoff after this pass is later: kept at 15
    assert passes.take(3.0) == []

    passes.on_batch(["c"])
    assert passes.take(4.0) == ["c"]
    passes.passed(False, wake=9.0)  # c's new segment must roll at 9: every topic then
    assert passes.take(8.9) == []
    passes.on_batch(["a"])
    assert passes.take(9.0) is None  # every topic, the written one with them
    passes.passed(True, wake=24.0)
    assert passes.take(10.0) == []
    assert passes.take(24.0) is None


def test_changed_topic_configs_make_the_next_pass_look_at_every_topic() -> None:
    passes = PassSchedule(next_full=15.0)
    passes.everything_now()
    assert passes.take(1.0) is None
    passes.passed(True, wake=16.0)
    assert passes.take(2.0) == []
