"""Protobuf messages to column types and values, and the message indexes of the wire format."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compactor.formats.protobuf import _name_at, message_to_arrow, message_to_python
from compactor.formats.types import TIMESTAMP, Untypable
from tests.proto_messages import hollow_file, message_classes, recursive_file, shop_file

CUSTOMER = pa.struct([
    ("name", pa.string()), ("age", pa.int32()), ("points", pa.decimal128(20, 0)),
    ("tags", pa.list_(pa.string())), ("since", TIMESTAMP),
    ("address", pa.struct([("city", pa.string())])), ("tier", pa.string()),
    ("nickname", pa.string()), ("counters", pa.map_(pa.string(), pa.int64())),
    ("note", pa.string()),
])


def test_a_message_becomes_a_struct_of_delta_types() -> None:
    customer = message_classes(shop_file())["Customer"]
    assert message_to_arrow(customer.DESCRIPTOR) == CUSTOMER


def test_values_fit_their_type_with_presence_as_protobuf_defines_it() -> None:
    customer = message_classes(shop_file())["Customer"]
    full = customer(name="ann", age=41, points=2**64 - 1, tags=["a", "b"], tier=1,
                    nickname="an", counters={"logins": 7})
    full.since.FromMicroseconds(1_700_000_000_123_456)
    full.address.city = "Oslo"
    full.note.value = "vip"
    empty = customer()
    unknown_enum = customer(tier=5)  # proto3 enums are open: a number without a name
    values = [message_to_python(m) for m in (full, empty, unknown_enum)]
    rows = pa.array(values, type=CUSTOMER).to_pylist()
    assert rows[0]["points"] == 2**64 - 1  # no wrap-around: uint64 is decimal(20,0)
    assert rows[0]["since"].isoformat() == "2023-11-14T22:13:20.123456+00:00"
    assert (rows[0]["tier"], rows[0]["nickname"], rows[0]["note"]) == ("GOLD", "an", "vip")
    assert rows[0]["counters"] == [("logins", 7)]
    assert rows[0]["address"] == {"city": "Oslo"}
    # unset: scalars hold their defaults, fields that track presence are null
    assert (rows[1]["name"], rows[1]["age"], rows[1]["tier"], rows[1]["tags"]) == ("", 0,
                                                                                  "FREE", [])
    assert (rows[1]["nickname"], rows[1]["since"], rows[1]["address"], rows[1]["note"]) == (
        None, None, None, None)
    assert rows[2]["tier"] == "5"


def test_messages_without_fields_get_no_column() -> None:
    """Parquet cannot store an empty struct; ``Empty`` (and a message of only such fields)
    holds no data, so it is left out of the type and of the values alike."""
    holder = message_classes(hollow_file())["Holder"]
    message = holder(name="x")
    message.hollow.SetInParent()
    message.hollows.add()
    assert message_to_arrow(holder.DESCRIPTOR) == pa.struct([("name", pa.string())])
    assert message_to_python(message) == {"name": "x"}


def test_a_recursive_message_has_no_column_type() -> None:
    node = message_classes(recursive_file())["Node"]
    with pytest.raises(Untypable, match=r"tree.Node contains itself"):
        message_to_arrow(node.DESCRIPTOR)


@pytest.mark.parametrize("indexes, name", [
    ((0,), "shop.Customer"), ((1,), "shop.Order"), ((0, 0), "shop.Customer.Address"),
    ((0, 1), "shop.Customer.CountersEntry"),
])
def test_message_indexes_name_types_in_declaration_order(indexes, name) -> None:
    assert _name_at(shop_file(), indexes) == name


@pytest.mark.parametrize("indexes, says", [
    ((2,), r"\[2\] name no message: there are 2 top-level"),
    ((0, 5), r"there are 2 nested in shop.Customer"),
])
def test_message_indexes_out_of_range_are_untypable(indexes, says) -> None:
    with pytest.raises(Untypable, match=says):
        _name_at(shop_file(), indexes)
