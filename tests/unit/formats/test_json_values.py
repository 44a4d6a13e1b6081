"""JSON values brought to the declared schema's types as Spark's JSON reader reads them, and
every mismatch named by its field's path."""

import datetime as dt
import decimal
import math

import pyarrow as pa
import pytest

from compactor.formats.json_values import Mismatch, conform
from compactor.formats.types import ddl_to_arrow

UTC = dt.UTC


@pytest.mark.parametrize(("ddl", "given", "expected"), [
    ("t TIMESTAMP", "2024-05-01T12:00:00Z", dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),
    ("t TIMESTAMP", "2024-05-01 14:00:00.5+02:00",
     dt.datetime(2024, 5, 1, 14, 0, 0, 500000, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
    ("t TIMESTAMP", "2024-05-01T12:00:00", dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),  # no zone
    ("t TIMESTAMP", "2024-05-01", dt.datetime(2024, 5, 1, tzinfo=UTC)),
    ("t TIMESTAMP", 1714564800, dt.datetime(2024, 5, 1, 12, tzinfo=UTC)),  # epoch seconds
    ("t TIMESTAMP", 1714564800.25, dt.datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=UTC)),
    ("d DATE", "2024-05-01", dt.date(2024, 5, 1)),
    ("d DATE", "2024-05-01T23:30:00-02:00", dt.date(2024, 5, 2)),  # its date in UTC
    ("s STRING", 12, "12"),
    ("s STRING", {"a": [1, True]}, '{"a": [1, true]}'),
    ("b BINARY", "aGk=", b"hi"),
    ("x DOUBLE", "NaN", math.nan),
    ("x DOUBLE", 3, 3.0),
    ("n DECIMAL(10,2)", "12.5", decimal.Decimal("12.50")),
    ("n DECIMAL(10,2)", 7, decimal.Decimal("7.00")),
    ("i INT", 3.0, 3),
    ("a ARRAY<INT>", [1, None, 2], [1, None, 2]),
    ("m MAP<STRING, BIGINT>", {"a": 1}, [("a", 1)]),
])
def test_values_spark_s_json_reader_takes(ddl: str, given: object, expected: object) -> None:
    type_ = ddl_to_arrow(ddl)
    name = type_[0].name
    got = conform({name: given, "undeclared": 1}, type_)[name]
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(got)
    else:
        assert got == expected
    pa.array([{name: got}], type=type_)  # and Arrow builds the column from it


@pytest.mark.parametrize(("ddl", "given", "message"), [
    ("updated_at TIMESTAMP", "yesterday",
     'updated_at: expected TIMESTAMP, found a string (not an ISO-8601 time); quoting the '
     'record: "yesterday"'),
    ("d DATE", 19000, "d: expected DATE, found a number; quoting the record: 19000"),
    ("id BIGINT", "7", 'id: expected BIGINT, found a string; quoting the record: "7"'),
    ("id INT", 2 ** 31, "id: expected INT, found a number (out of range for 32 bits); "
                        "quoting the record: 2147483648"),
    ("ok BOOLEAN", 1, "ok: expected BOOLEAN, found a number; quoting the record: 1"),
    ("n DECIMAL(4,2)", 123.5,
     "n: expected DECIMAL(4,2), found a number (out of range); quoting the record: 123.5"),
    ("b BINARY", "not base64!",
     'b: expected BINARY, found a string (not base64); quoting the record: "not base64!"'),
    ("address STRUCT<geo: STRUCT<lat: DOUBLE>>", {"geo": {"lat": "north"}},
     'address.geo.lat: expected DOUBLE, found a string; quoting the record: "north"'),
    ("tags ARRAY<INT>", [1, "two"],
     'tags[1]: expected INT, found a string; quoting the record: "two"'),
    ("a ARRAY<INT>", {"x": 1}, 'a: expected ARRAY, found an object; quoting the record: {"x": 1}'),
])
def test_a_mismatch_names_the_field_and_the_type_and_quotes_the_value_last(ddl: str, given: object,
                                                           message: str) -> None:
    type_ = ddl_to_arrow(ddl)
    with pytest.raises(Mismatch) as raised:
        conform({type_[0].name: given}, type_)
    assert str(raised.value) == message


def test_missing_fields_and_nulls_are_null() -> None:
    type_ = ddl_to_arrow("a INT, b STRUCT<c: STRING>")
    assert conform({"b": None}, type_) == {"a": None, "b": None}


def test_a_writer_schema_mismatch_names_the_field_too() -> None:
    """A registry record whose value its column type cannot hold is rejected with the field's
    path, not only Arrow's words."""
    from compactor.formats.decoder import Decoder, Group
    from compactor.formats.spec import RecordFormat

    decoder = Decoder(RecordFormat("json", "id INT"), None, "t", False)
    group = Group(7, pa.struct([("address", pa.struct([("zip", pa.int32())]))]), [0, 1],
                  [{"address": {"zip": 1}}, {"address": {"zip": "N1 9GU"}}])
    reasons: list[str | None] = [None, None]
    decoder._check_types(group, reasons)
    assert group.rows == [0] and reasons[0] is None
    assert reasons[1] == ('does not match the column type of schema id 7: address.zip: '
                          'expected INT, found a string; quoting the record: "N1 9GU"')
