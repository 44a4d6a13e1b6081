"""Decoded values as table columns: names, row alignment, and schema evolution."""

from __future__ import annotations

import pyarrow as pa

from compactor.formats.columns import column_names, typed_columns
from compactor.formats.decoder import Decoded, Decoder, Group
from compactor.formats.spec import RecordFormat

V1 = pa.struct([("id", pa.int64()), ("name", pa.string())])
V2 = pa.struct([("id", pa.int64()), ("name", pa.string()), ("country", pa.string())])
V3 = pa.struct([("id", pa.string()), ("name", pa.string())])


def test_names_avoid_kafka_columns() -> None:
    assert column_names("value", pa.struct([("offset", pa.int64()), ("x", pa.int32())])) == [
        "value_offset", "x"]
    assert column_names("key", pa.struct([("id", pa.int64())])) == ["key_id"]
    assert column_names("value", pa.string()) == ["value_decoded"]


def test_rows_keep_their_place_new_fields_add_columns_type_changes_are_refused() -> None:
    decoded = Decoded(
        groups=[Group(2, V2, [3], [{"id": 4, "name": "d", "country": "DE"}]),
                Group(1, V1, [0, 2], [{"id": 1, "name": "a"}, {"id": 3, "name": "c"}]),
                Group(3, V3, [4], [{"id": "x", "name": "e"}])],
        reasons=[None, "not in the wire format", None, None, None],
        schema_ids=[1, None, 1, 2, 3])
    got = typed_columns(5, [("value", decoded)], pa.schema([]))
    assert got.table.column_names == ["id", "name", "country"]
    assert got.table.column("id").to_pylist() == [1, None, 3, 4, None]
    assert got.table.column("country").to_pylist() == [None, None, None, "DE", None]
    assert got.failed == [None, "value: not in the wire format", None, None, None]
    assert got.type_changes[:4] == [None] * 4
    assert "'id' the type string, but the table's column is int64" in got.type_changes[4]
    assert got.schema_ids[4] == 3 and got.added == ["id", "name", "country"]


def test_the_tables_existing_type_wins() -> None:
    decoded = Decoded([Group(9, V3, [0], [{"id": "x", "name": "e"}])], [None], [9])
    got = typed_columns(1, [("value", decoded)], pa.schema([("id", pa.int64())]))
    assert got.type_changes[0] is not None and got.added == []


def test_json_with_a_declared_schema_rejects_what_does_not_fit() -> None:
    decoder = Decoder(RecordFormat("json", "id BIGINT, tags ARRAY<STRING>"), None, "t", False)
    got = decoder.decode(pa.array([b'{"id": 1, "tags": ["a"]}', b"{nope", b'{"id": "x"}',
                                   None, b"[1]", b"\xff", b'{"id": 2, "extra": 1}'],
                                  pa.binary()))
    assert [g.rows for g in got.groups] == [[0, 6]]
    reasons = got.reasons
    assert reasons[0] is None and reasons[3] is None and reasons[6] is None
    assert reasons[1].startswith("not valid JSON")
    assert reasons[2].startswith("does not match the declared schema (value.schema)")
    assert "JSON list" in reasons[4] and reasons[5].startswith("not UTF-8")
