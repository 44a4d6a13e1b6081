import pytest

from compactor.config import (
    LONG_MAX,
    broker_overrides,
    build_config,
    resolve_topic,
    with_topic_configs,
)
from compactor.exceptions import ConfigError

BASE = {"bootstrap.servers": "localhost:9092", "topics": "orders,orders.v1", "lake.path": "/l"}


def config(**extra: str):
    return build_config({**BASE, **extra})


def test_kafka_defaults_when_nothing_is_given() -> None:
    tc = resolve_topic(config(), "orders", {})
    assert tc.cleanup_policy == frozenset({"delete"})
    assert tc.segment_bytes == 1073741824
    assert tc.segment_ms == 7 * 24 * 3600 * 1000
    assert tc.min_cleanable_dirty_ratio == 0.5
    assert tc.max_compaction_lag_ms == LONG_MAX
    assert tc.delete_retention_ms == 86400000
    assert tc.sources["segment.ms"] == "kafka default"


def test_layers_topic_override_file_broker_log_default() -> None:
    cfg = build_config({
        **BASE,
        "topic.orders.v1.segment.ms": "111",  # topic names may contain dots
        "segment.ms": "222",
        "delete.retention.ms": "333",
        "log.cleaner.delete.retention.ms": "444",
        "log.cleaner.min.compaction.lag.ms": "5",
        "log.roll.hours": "1",
    })
    broker = {"delete.retention.ms": "999", "min.compaction.lag.ms": "7"}
    v1 = resolve_topic(cfg, "orders.v1", broker)
    assert v1.segment_ms == 111 and v1.sources["segment.ms"] == "topic override"
    orders = resolve_topic(cfg, "orders", broker)
    assert orders.segment_ms == 222 and orders.sources["segment.ms"] == "file"
    assert orders.delete_retention_ms == 333  # the file beats the broker
    assert orders.min_compaction_lag_ms == 7  # the broker beats log.* defaults
    bare = resolve_topic(cfg, "orders", {})
    assert bare.min_compaction_lag_ms == 5
    assert bare.sources["min.compaction.lag.ms"] == "broker default (file)"


def test_broker_wide_hours_alias() -> None:
    cfg = build_config({**BASE, "log.retention.hours": "2"})
    assert resolve_topic(cfg, "orders", {}).retention_ms == 2 * 3_600_000


def test_kip354_roll_uses_min_of_segment_ms_and_the_cleaning_lag_for_compacted_topics() -> None:
    cfg = config(**{"cleanup.policy": "compact", "segment.ms": "100000",
                    "max.compaction.lag.ms": "20000"})
    tc = resolve_topic(cfg, "orders", {})
    # Planned backwards from the max lag: minus the vacuum grace (M/4) and a pass allowance.
    assert tc.vacuum_grace_ms == 5000 and tc.pass_allowance_ms == 4000
    assert tc.cleaning_lag_ms == 20000 - 5000 - 4000 == tc.roll_ms
    plain = config(**{"cleanup.policy": "delete", "segment.ms": "10000",
                      "max.compaction.lag.ms": "3000"})
    assert resolve_topic(plain, "orders", {}).roll_ms == 10000


def test_a_grace_that_outlasts_the_max_lag_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        config(**{"cleanup.policy": "compact", "max.compaction.lag.ms": "5000",
                  "vacuum.grace.ms": "5000"})
    text = str(info.value)
    assert "vacuum.grace.ms (topic orders)=5000" in text
    assert "at least as long as max.compaction.lag.ms (5000)" in text
    assert info.value.exit_code == 2


@pytest.mark.parametrize("settings", [
    {"max.compaction.lag.ms": "3000"},  # valid in Kafka: grace 750 + allowance 3000 > 3000
    {"max.compaction.lag.ms": "5000", "vacuum.grace.ms": "4500"},
])
def test_a_kafka_valid_short_max_lag_runs_best_effort_with_a_warning(settings) -> None:
    tc = resolve_topic(config(**{"cleanup.policy": "compact", **settings}), "orders", {})
    assert tc.deadline_best_effort and tc.cleaning_lag_ms == 0 and tc.roll_ms == 1
    warning = tc.deadline_warning or ""
    assert "best effort" in warning
    assert f"max.compaction.lag.ms={settings['max.compaction.lag.ms']}" in warning
    long = resolve_topic(config(**{"cleanup.policy": "compact",
                                   "max.compaction.lag.ms": "60000"}), "orders", {})
    assert not long.deadline_best_effort and long.deadline_warning is None


def test_a_trigger_longer_than_the_cleaning_lag_makes_the_deadline_best_effort() -> None:
    # M = 60 s: grace 15 s, allowance 12 s, so cleaning is due 33 s after a tombstone.
    settings = {"cleanup.policy": "compact", "max.compaction.lag.ms": "60000"}
    kept = resolve_topic(config(**settings, **{"trigger.interval.ms": "33000"}), "orders", {})
    assert kept.cleaning_lag_ms == 33_000
    assert not kept.deadline_best_effort and kept.deadline_warning is None
    late = resolve_topic(config(**settings, **{"trigger.interval.ms": "33001"}), "orders", {})
    assert late.deadline_best_effort
    assert late.cleaning_lag_ms == 33_000 == late.roll_ms  # the plan itself is unchanged
    warning = late.deadline_warning or ""
    assert "erasure deadline of orders is best effort: trigger.interval.ms=33001" in warning
    assert "lower trigger.interval.ms to 33000 or less" in warning
    # Not a topic without a deadline.
    plain = resolve_topic(config(**{"cleanup.policy": "compact",
                                    "trigger.interval.ms": "600000"}), "orders", {})
    assert not plain.deadline_best_effort


def test_max_lag_below_min_lag_is_refused_with_key_value_and_rule() -> None:
    with pytest.raises(ConfigError) as info:
        config(**{"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"})
    text = str(info.value)
    assert "max.compaction.lag.ms" in text and "1000" in text
    assert "must be >= min.compaction.lag.ms (5000)" in text
    assert info.value.exit_code == 2


def test_conflict_found_only_after_broker_values_is_refused() -> None:
    cfg = config(**{"min.compaction.lag.ms": "5000"})
    with pytest.raises(ConfigError, match="must be >= min.compaction.lag.ms"):
        with_topic_configs(cfg, {"orders": {"max.compaction.lag.ms": "10"}})


@pytest.mark.parametrize(("key", "value", "rule"), [
    ("min.cleanable.dirty.ratio", "1.5", "between 0 and 1"),
    ("min.cleanable.dirty.ratio", "-0.1", "between 0 and 1"),
    ("min.cleanable.dirty.ratio", "half", "must be a number"),
    ("segment.bytes", "10", ">= 14"),
    ("cleanup.policy", "compact,erase", "'compact', 'delete'"),
    ("fail.on.data.loss", "yes", "true or false"),
    ("log.cleaner.dedupe.buffer.size", "1", ">= 24"),
    ("starting.offsets", "middle", "'earliest' or 'latest'"),
    ("lake.path", "ftp://host/lake", "a local path, a file:// URI or object storage"),
    ("lake.path", "s3://bucket/lake", "must be set when lake.path is object storage"),
])
def test_invalid_values_name_key_value_and_rule(key: str, value: str, rule: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(**{key: value})
    assert key in str(info.value) and value in str(info.value) and rule in str(info.value)


def test_object_storage_lake_takes_storage_options() -> None:
    cfg = config(**{"lake.path": "s3://bucket/lake", "checkpoint.path": "/var/ck",
                    "lake.storage.AWS_REGION": "eu-west-1",
                    "lake.storage.AWS_ENDPOINT_URL": "http://minio:9000"})
    assert dict(cfg.storage.options) == {"AWS_REGION": "eu-west-1",
                                         "AWS_ENDPOINT_URL": "http://minio:9000"}
    assert cfg.storage.delta_options("s3://bucket/lake/t/log") == dict(cfg.storage.options)
    assert cfg.storage.delta_options("/local/table") is None  # local tables take none
    with pytest.raises(ConfigError, match="downstream.d.path.*object storage"):
        config(**{"downstream.d.path": "hdfs://nn/marts", "downstream.d.topic": "orders",
                  "downstream.d.key.column": "id"})


def test_unknown_key_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'segment.bytes'"):
        config(**{"segment.byte": "100"})


def test_missing_required_key() -> None:
    with pytest.raises(ConfigError, match="lake.path.*is required"):
        build_config({"bootstrap.servers": "x:1", "topics": "a"})


def test_override_for_unmirrored_topic_is_refused() -> None:
    with pytest.raises(ConfigError, match="not in 'topics'"):
        config(**{"topic.payments.segment.ms": "1000"})


def test_pass_through_and_defaults() -> None:
    cfg = config(**{"kafka.security.protocol": "SSL", "spark.master": "local[2]"})
    assert cfg.kafka_client_config()["security.protocol"] == "SSL"
    assert cfg.kafka_client_config()["isolation.level"] == "read_committed"
    assert cfg.spark["spark.master"] == "local[2]"
    assert cfg.checkpoint_path == "/l/checkpoints"


def test_config_is_frozen() -> None:
    cfg = config()
    with pytest.raises(AttributeError):
        cfg.lake_path = "/elsewhere"  # type: ignore[misc]


def test_broker_overrides_skip_kafka_defaults_but_keep_real_settings() -> None:
    chosen = broker_overrides({
        "cleanup.policy": ("compact", True),  # mislabelled as default, but not Kafka's default
        "segment.ms": ("604800000", True),  # Kafka's default: not the topic's own
        "retention.ms": ("604800000", False),  # explicitly set, even if equal
        "flush.ms": ("1", False),  # not a key the mirror uses
    })
    assert chosen == {"cleanup.policy": "compact", "retention.ms": "604800000"}


def test_a_table_merge_cadence_past_the_erasure_deadline_is_refused() -> None:
    # M = 20 s: cleaning due at 11 s, less the 5 s a tombstone may wait for its batch.
    cfg = config(**{"cleanup.policy": "compact", "max.compaction.lag.ms": "20000",
                    "table.merge.interval.ms": "6001"})
    with pytest.raises(ConfigError, match="table.merge.interval.ms=6001: would leave "
                       "tombstones of orders unmerged past its erasure deadline: it must be at "
                       "most 6000 ms"):
        with_topic_configs(cfg, {})
    ok = config(**{"cleanup.policy": "compact", "max.compaction.lag.ms": "20000",
                   "table.merge.interval.ms": "6000"})
    assert with_topic_configs(ok, {}).table_merge_interval_ms == 6000
    fast = config(**{"cleanup.policy": "compact", "max.compaction.lag.ms": "20000",
                     "table.merge.interval.ms": "10000", "trigger.interval.ms": "1000"})
    assert with_topic_configs(fast, {}).table_merge_interval_ms == 10000


def test_the_latest_value_table_lags_at_most_10_s_and_never_past_the_deadline() -> None:
    plain = with_topic_configs(config(), {})
    assert plain.table_merge_ms("orders") == 10_000  # the default cadence
    roomy = with_topic_configs(config(**{"cleanup.policy": "compact",
                                         "max.compaction.lag.ms": "60000"}), {})
    assert roomy.table_merge_ms("orders") == 10_000 < roomy.topic("orders").table_lag_ms
    # M = 20 s: cleaning due at 11 s; a tombstone may have waited a 5 s trigger to land, so
    # the table merges within 6 s of it, and is rewritten by 11 s, as the log is cleaned.
    tight = with_topic_configs(config(**{"cleanup.policy": "compact",
                                         "max.compaction.lag.ms": "20000"}), {})
    assert tight.topic("orders").cleaning_lag_ms == 11_000
    assert tight.table_merge_ms("orders") == 6_000 == tight.topic("orders").table_lag_ms
    short = with_topic_configs(config(**{"cleanup.policy": "compact", "trigger.interval.ms": "500",
                                         "max.compaction.lag.ms": "6000"}), {})
    assert short.table_merge_ms("orders") == short.topic("orders").cleaning_lag_ms - 500 < 10_000
    every = with_topic_configs(config(**{"table.merge.interval.ms": "0"}), {})
    assert every.table_merge_ms("orders") == 0  # after every micro-batch, as set
    best_effort = with_topic_configs(config(**{"cleanup.policy": "compact",
                                               "max.compaction.lag.ms": "3000"}), {})
    assert best_effort.topic("orders").deadline_best_effort
    assert best_effort.table_merge_ms("orders") == 0


def test_the_erasure_ledger_keeps_finished_erasures_seven_days_unless_told() -> None:
    assert resolve_topic(config(), "orders", {}).erasure_ledger_retention_ms == 604800000
    cfg = config(**{"log.erasure.ledger.retention.ms": "-1",
                    "topic.orders.erasure.ledger.retention.ms": "86400000"})
    assert resolve_topic(cfg, "orders", {}).erasure_ledger_retention_ms == 86400000
    assert resolve_topic(cfg, "orders.v1", {}).erasure_ledger_retention_ms == -1  # for ever
    with pytest.raises(ConfigError) as info:
        resolve_topic(config(**{"erasure.ledger.retention.ms": "-2"}), "orders", {})
    assert "erasure.ledger.retention.ms" in str(info.value) and "-2" in str(info.value)
    assert "must be >= -1" in str(info.value)


def test_read_uncommitted_is_refused_for_a_compacted_topic_only() -> None:
    """Aborted transactions' records, mirrored as data, would win compaction."""
    cfg = config(**{"kafka.isolation.level": "read_uncommitted"})
    assert resolve_topic(cfg, "orders", {"cleanup.policy": "delete"}).delete
    for policy in ("compact", "compact,delete"):
        with pytest.raises(ConfigError) as info:
            resolve_topic(cfg, "orders", {"cleanup.policy": policy})
        assert info.value.key == "kafka.isolation.level" and info.value.exit_code == 2
        assert "topic orders is compacted" in str(info.value)
        assert "remove the setting" in str(info.value)
