"""The process's kept consumer: lent out, given back, replaced, closed when idle."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from compactor.kafka import consumer_cache

# No broker: making a librdkafka consumer does not connect until it is used.
CONF = {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": "1000"}


@pytest.fixture(autouse=True)
def _nothing_kept() -> Iterator[None]:
    consumer_cache.close_kept()
    yield
    consumer_cache.close_kept()


def _closed(consumer: object) -> bool:
    try:
        consumer.assignment()  # type: ignore[attr-defined]
    except RuntimeError:
        return True
    return False


def test_a_successful_read_gives_its_consumer_to_the_next() -> None:
    with consumer_cache.borrowed_consumer(CONF) as first:
        pass
    with consumer_cache.borrowed_consumer(dict(CONF)) as second:
        assert second is first
        with consumer_cache.borrowed_consumer(CONF) as third:  # lent out: another is made
            assert third is not first
    # The first given back is kept; the other, given back second, is closed.
    assert consumer_cache._kept is not None and consumer_cache._kept[1] is third
    assert _closed(first) and not _closed(third)


def test_other_settings_replace_the_kept_consumer() -> None:
    with consumer_cache.borrowed_consumer(CONF) as first:
        pass
    with consumer_cache.borrowed_consumer({**CONF, "client.id": "other"}) as second:
        assert second is not first
    assert _closed(first)


def test_a_failed_read_closes_its_consumer_and_keeps_none() -> None:
    with pytest.raises(ValueError), consumer_cache.borrowed_consumer(CONF) as consumer:
        raise ValueError("the read failed")
    assert _closed(consumer)
    assert consumer_cache._kept is None


def test_an_idle_consumer_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consumer_cache, "IDLE_S", 0.1)
    with consumer_cache.borrowed_consumer(CONF) as consumer:
        pass
    deadline = time.monotonic() + 30
    while not _closed(consumer) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _closed(consumer)
    assert consumer_cache._kept is None
