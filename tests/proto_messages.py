"""Protobuf message classes for the tests, built from descriptors (no ``protoc`` here).

What ``protoc --python_out`` would make of, for ``version=1``::

    syntax = "proto3";
    package shop;
    import "google/protobuf/timestamp.proto";
    import "google/protobuf/wrappers.proto";
    enum Tier { FREE = 0; GOLD = 1; }
    message Customer {
      string name = 1;  int32 age = 2;  uint64 points = 3;  repeated string tags = 4;
      google.protobuf.Timestamp since = 5;  Address address = 6;  Tier tier = 7;
      optional string nickname = 8;  map<string, int64> counters = 9;
      google.protobuf.StringValue note = 10;
      message Address { string city = 1; }
    }
    message Order { string id = 1; }

``version=2`` adds ``string country = 11;`` to ``Customer``; ``age_type="string"`` declares
``age`` as a string (a type change).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    empty_pb2,
    timestamp_pb2,
    wrappers_pb2,
)
from google.protobuf.message_factory import GetMessageClass

_F = descriptor_pb2.FieldDescriptorProto


def _field(message: Any, name: str, number: int, type_: int, *, repeated: bool = False,
           type_name: str | None = None) -> Any:
    field = message.field.add(name=name, number=number, type=type_,
                              label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL)
    if type_name:
        field.type_name = type_name
    return field


def shop_file(version: int = 1, age_type: str = "int32",
              name: str = "shop.proto") -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name=name, package="shop", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"])
    tier = proto.enum_type.add(name="Tier")
    tier.value.add(name="FREE", number=0)
    tier.value.add(name="GOLD", number=1)
    customer = proto.message_type.add(name="Customer")
    _field(customer, "name", 1, _F.TYPE_STRING)
    _field(customer, "age", 2, _F.TYPE_STRING if age_type == "string" else _F.TYPE_INT32)
    _field(customer, "points", 3, _F.TYPE_UINT64)
    _field(customer, "tags", 4, _F.TYPE_STRING, repeated=True)
    _field(customer, "since", 5, _F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp")
    address = customer.nested_type.add(name="Address")
    _field(address, "city", 1, _F.TYPE_STRING)
    _field(customer, "address", 6, _F.TYPE_MESSAGE, type_name=".shop.Customer.Address")
    _field(customer, "tier", 7, _F.TYPE_ENUM, type_name=".shop.Tier")
    customer.oneof_decl.add(name="_nickname")
    nickname = _field(customer, "nickname", 8, _F.TYPE_STRING)
    nickname.proto3_optional, nickname.oneof_index = True, 0
    entry = customer.nested_type.add(name="CountersEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_INT64)
    _field(customer, "counters", 9, _F.TYPE_MESSAGE, repeated=True,
           type_name=".shop.Customer.CountersEntry")
    _field(customer, "note", 10, _F.TYPE_MESSAGE, type_name=".google.protobuf.StringValue")
    if version >= 2:
        _field(customer, "country", 11, _F.TYPE_STRING)
    order = proto.message_type.add(name="Order")
    _field(order, "id", 1, _F.TYPE_STRING)
    return proto


def message_classes(proto: descriptor_pb2.FileDescriptorProto) -> dict[str, type]:
    """The file's top-level message classes by name, each from a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.AddSerializedFile(empty_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return {m.name: GetMessageClass(pool.FindMessageTypeByName(f"{proto.package}.{m.name}"))
            for m in proto.message_type}


def recursive_file() -> descriptor_pb2.FileDescriptorProto:
    """``message Node { string name = 1; repeated Node children = 2; }``"""
    proto = descriptor_pb2.FileDescriptorProto(name="tree.proto", package="tree",
                                               syntax="proto3")
    node = proto.message_type.add(name="Node")
    _field(node, "name", 1, _F.TYPE_STRING)
    _field(node, "children", 2, _F.TYPE_MESSAGE, repeated=True, type_name=".tree.Node")
    return proto


def hollow_file() -> descriptor_pb2.FileDescriptorProto:
    """``message Hollow { google.protobuf.Empty nothing = 1; }`` and
    ``message Holder { string name = 1; Hollow hollow = 2; repeated Hollow hollows = 3; }``"""
    proto = descriptor_pb2.FileDescriptorProto(name="hollow.proto", package="hollow",
                                               syntax="proto3",
                                               dependency=["google/protobuf/empty.proto"])
    hollow = proto.message_type.add(name="Hollow")
    _field(hollow, "nothing", 1, _F.TYPE_MESSAGE, type_name=".google.protobuf.Empty")
    holder = proto.message_type.add(name="Holder")
    _field(holder, "name", 1, _F.TYPE_STRING)
    _field(holder, "hollow", 2, _F.TYPE_MESSAGE, type_name=".hollow.Hollow")
    _field(holder, "hollows", 3, _F.TYPE_MESSAGE, repeated=True, type_name=".hollow.Hollow")
    return proto
