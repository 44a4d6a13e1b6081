"""The app ids are part of the lake's format: a rename would orphan every existing lake."""

from compactor.positions import ALL, CLEANER, ERASE, INGEST, TABLE, WRITER, query_checkpoint


def test_app_ids_are_the_lake_format() -> None:
    assert INGEST.id(3) == "compactor-ingest-3"
    assert CLEANER.id(0) == "compactor-cleaner-0"
    assert TABLE.id(7) == "compactor-table-7"
    assert ERASE.id(2, "users") == "compactor-erase-users-2"
    assert WRITER.id() == "compactor-writer"
    assert len({p.app_id for p in ALL}) == len(ALL)


def test_a_move_carries_its_version_and_time() -> None:
    txn = INGEST.moved_to(41, 1, now_ms=1000)
    assert (txn.app_id, txn.version, txn.last_updated) == ("compactor-ingest-1", 41, 1000)


def test_the_query_checkpoint_sits_under_checkpoint_path() -> None:
    assert query_checkpoint("/data/ckpt/") == "/data/ckpt/mirror"
