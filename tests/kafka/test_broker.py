"""The test broker's own set-up."""

from __future__ import annotations

from tests.kafka.broker import _cluster_id


def test_cluster_ids_never_start_with_a_dash() -> None:
    # A base64 id starts with "-" once in 64; the storage tool then fails to format the node.
    ids = [_cluster_id() for _ in range(2000)]
    assert not [i for i in ids if i.startswith("-")]
    assert {len(i) for i in ids} == {22}
    assert len(set(ids)) == len(ids)
