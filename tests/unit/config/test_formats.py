"""The format keys at load: per topic, checked, and refused with the key and the rule."""

from __future__ import annotations

import pytest

from compactor.config import build_config
from compactor.exceptions import ConfigError

BASE = {"bootstrap.servers": "h:9092", "topics": "users,orders", "lake.path": "/tmp/lake"}


def test_plain_keys_apply_to_every_topic_and_topic_keys_win() -> None:
    config = build_config({**BASE, "value.format": "json", "value.schema": "id BIGINT",
                           "topic.orders.value.format": "avro",
                           "topic.orders.key.format": "string",
                           "schema.registry.url": "http://r:8081",
                           "schema.registry.basic.auth.user.info": "u:p"})
    users, orders = config.format("users"), config.format("orders")
    assert (users.key.name, users.value.name, users.value.schema) == ("bytes", "json",
                                                                       "id BIGINT")
    assert (orders.key.name, orders.value.name, orders.value.schema) == ("string", "avro", None)
    assert orders.registry == {"url": "http://r:8081", "basic.auth.user.info": "u:p"}


@pytest.mark.parametrize("extra, key, says", [
    ({"value.format": "xml"}, "value.format", "must be one of bytes, string, json"),
    ({"value.format": "json"}, "value.schema", "is required when value.format=json"),
    ({"key.format": "json", "key.schema": "id BIGGINT"}, "key.schema", "unknown type"),
    ({"value.format": "avro"}, "schema.registry.url", "is required: topic users"),
    ({"topic.users.value.format": "protobuf"}, "schema.registry.url", "value.format=protobuf"),
    ({"value.schema": "id INT"}, "value.schema", "only read when value.format=json"),
    ({"schema.registry.url": "http://r", "schema.registry.nope": "1"}, "schema.registry.*",
     "Unrecognized properties: nope"),
])
def test_bad_format_keys_name_the_key_and_the_rule(extra, key, says) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        build_config({**BASE, **extra})
    assert caught.value.key == key
