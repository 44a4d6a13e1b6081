"""Every key the compactor reads: Kafka's names, parsers, rules and defaults.

Topic keys carry Kafka's topic-config names and defaults and the broker-wide ``log.*`` key
that defaults them; ``log.cleaner.*`` keys are broker-wide; the pipeline keys are this
product's own. A rule returns None when a value is legal, else the sentence that says why not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from compactor.exceptions import ConfigError

LONG_MAX = 2**63 - 1
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

Check = Callable[[Any], str | None]


def at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"must be >= {low:g}"


def _between(low: float, high: float) -> Check:
    return lambda v: None if low <= v <= high else f"must be between {low:g} and {high:g}"


def _any(_: Any) -> str | None:
    return None


_IDENTIFIER = re.compile(r"^[A-Za-z0-9_]+$")


def _identifier(value: str) -> str | None:
    return None if _IDENTIFIER.match(value) else "must be letters, digits and '_' only"


def _identifier_or_empty(value: str) -> str | None:
    return None if not value else _identifier(value)


def _policy(value: str) -> frozenset[str]:
    parts = frozenset(p.strip() for p in value.split(",") if p.strip())
    if not parts or not parts <= {"compact", "delete"}:
        raise ValueError("must be 'compact', 'delete' or 'compact,delete'")
    return parts


def _bool(value: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError("must be true or false")


def parse_int(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError("must be a whole number") from None


def _float(value: str) -> float:
    try:
        result = float(value.strip())
    except ValueError:
        raise ValueError("must be a number") from None
    if math.isnan(result):
        raise ValueError("must be a number")
    return result


@dataclass(frozen=True)
class Key:
    """One configuration key: its name, the config object's field it fills, its parser, its
    rule, its default (None: required) and, for a topic key, the broker-wide ``log.*`` key
    that defaults it. The config objects are built from these tables, nothing else."""

    name: str
    field: str
    parse: Callable[[str], Any]
    check: Check
    default: Any
    broker_key: str = ""
    kafka: bool = True  # a key of Kafka's own (False: this product's), for describe-config


def _table(*keys: Key) -> Mapping[str, Key]:
    return {k.name: k for k in keys}


TOPIC_KEYS = _table(
    Key("cleanup.policy", "cleanup_policy", _policy, _any, frozenset({"delete"}),
        "log.cleanup.policy"),
    Key("segment.bytes", "segment_bytes", parse_int, at_least(14), 1073741824,
        "log.segment.bytes"),
    Key("segment.ms", "segment_ms", parse_int, at_least(1), 604800000, "log.roll.ms"),
    Key("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", _float, _between(0, 1), 0.5,
        "log.cleaner.min.cleanable.ratio"),
    Key("min.compaction.lag.ms", "min_compaction_lag_ms", parse_int, at_least(0), 0,
        "log.cleaner.min.compaction.lag.ms"),
    Key("max.compaction.lag.ms", "max_compaction_lag_ms", parse_int, at_least(1), LONG_MAX,
        "log.cleaner.max.compaction.lag.ms"),
    Key("delete.retention.ms", "delete_retention_ms", parse_int, at_least(0), 86400000,
        "log.cleaner.delete.retention.ms"),
    Key("retention.ms", "retention_ms", parse_int, at_least(-1), 604800000, "log.retention.ms"),
    Key("retention.bytes", "retention_bytes", parse_int, at_least(-1), -1,
        "log.retention.bytes"),
    # Not a Kafka key: how long files removed from the log stay on disk for readers of older
    # snapshots before vacuum deletes them. -1 = min(1 hour, max.compaction.lag.ms / 4).
    Key("vacuum.grace.ms", "vacuum_grace", parse_int, at_least(-1), -1,
        "log.cleaner.vacuum.grace.ms", kafka=False),
    # Not a Kafka key: how long the erasure ledger keeps an erasure once every target finished
    # it (Kafka's retention.ms default, 7 days); -1 keeps every erasure for ever.
    Key("erasure.ledger.retention.ms", "erasure_ledger_retention_ms", parse_int, at_least(-1),
        604800000, "log.erasure.ledger.retention.ms", kafka=False),
    # Not a Kafka key: a Delta change data feed on the latest-value table (readChangeFeed),
    # its change files deleted vacuum.grace.ms after they were written.
    Key("table.change.data.feed", "table_change_data_feed", _bool, _any, False,
        "log.table.change.data.feed", kafka=False),
)
# Kafka's coarser broker keys, used when the *.ms key is absent (ms wins, then minutes, hours).
BROKER_ALIASES: Mapping[str, tuple[tuple[str, int], ...]] = {
    "log.roll.ms": (("log.roll.hours", 3_600_000),),
    "log.retention.ms": (("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000)),
}

# Broker-wide cleaner keys (CleanerConfig).
CLEANER_KEYS = _table(
    Key("log.cleaner.enable", "enable", _bool, _any, True),
    Key("log.cleaner.threads", "threads", parse_int, at_least(1), 1),
    Key("log.cleaner.backoff.ms", "backoff_ms", parse_int, at_least(0), 15000),
    Key("log.cleaner.dedupe.buffer.size", "dedupe_buffer_size", parse_int, at_least(24),
        134217728),
    Key("log.cleaner.io.buffer.load.factor", "io_buffer_load_factor", _float,
        _between(0.01, 1), 0.9),
    Key("log.cleaner.io.max.bytes.per.second", "io_max_bytes_per_second", _float, at_least(1),
        math.inf),
)

# The pipeline's own keys (CompactorConfig).
PIPELINE_KEYS = _table(
    Key("bootstrap.servers", "bootstrap_servers", str.strip, _any, None),
    Key("topics", "topics", str, _any, None),
    Key("lake.path", "lake_path", str.strip, _any, None),
    Key("checkpoint.path", "checkpoint_path", str.strip, _any, ""),
    Key("trigger.interval.ms", "trigger_interval_ms", parse_int, at_least(0), 5000),
    Key("max.offsets.per.trigger", "max_offsets_per_trigger", parse_int, at_least(0), 0),
    # Spark's Kafka source's minPartitions and maxRecordsPerPartition for the mirror's write
    # tasks: at least this many tasks, and no more records per task (0: the cores decide).
    Key("min.partitions", "min_partitions", parse_int, at_least(0), 0),
    Key("max.records.per.partition", "max_records_per_partition", parse_int, at_least(0), 0),
    Key("starting.offsets", "starting_offsets", str.strip, _any, "earliest"),
    Key("fail.on.data.loss", "fail_on_data_loss", _bool, _any, True),
    # How stale the latest-value table may get: 0 MERGEs after every micro-batch, N at most
    # every N ms; -1 (default) is 10 s, shortened to what a topic's erasure deadline allows.
    Key("table.merge.interval.ms", "table_merge_interval_ms", parse_int, at_least(-1), -1),
    # Register each topic's log and latest-value table in the Spark session's catalog at
    # start, as <catalog.table.prefix><topic>_log and _table in catalog.database.
    Key("catalog.register", "catalog_register", _bool, _any, False),
    Key("catalog.database", "catalog_database", str.strip, _identifier, "default"),
    Key("catalog.table.prefix", "catalog_table_prefix", str.strip, _identifier_or_empty, ""),
    # Prometheus metrics of 'compactor run' on this port (0 = off).
    Key("metrics.port", "metrics_port", parse_int, _between(0, 65535), 0),
    # How long L/T/history keeps its minutes (compactor report); -1 keeps them for ever.
    Key("history.retention.ms", "history_retention_ms", parse_int, at_least(-1), 604800000),
    # Commit the mirrored offsets to a consumer group after each lake commit, so that lag
    # tools see the mirror (monitoring only: the lake holds the positions).
    Key("commit.offsets", "commit_offsets", _bool, _any, True),
    # That group; empty: compactor-<lake directory>-<hash of the lake path>.
    Key("group.id", "group_id", str.strip, _any, ""),
    # How often a running mirror reads its topics' configs from the broker again, as Kafka's
    # cleaner reads each log's config every round; -1: only at start.
    Key("config.refresh.interval.ms", "config_refresh_interval_ms", parse_int,
        lambda v: None if v == -1 or v >= 1000 else "must be -1 (only at start) or >= 1000",
        60_000),
)


def default(table: Mapping[str, Key], name: str) -> Any:
    """A key's default, for the config objects' field defaults."""
    return table[name].default


_BROKER_ONLY = {k for aliases in BROKER_ALIASES.values() for k, _ in aliases}
# Read by compactor.config.formats: how keys and values are decoded (plain or topic.<name>.).
FORMAT_KEYS = ("key.format", "value.format", "key.schema", "value.schema")
KNOWN_KEYS = frozenset(
    set(TOPIC_KEYS)
    | set(FORMAT_KEYS)
    | {"schema.registry.url"}
    | {t.broker_key for t in TOPIC_KEYS.values()}
    | _BROKER_ONLY
    | set(CLEANER_KEYS)
    | set(PIPELINE_KEYS)
)


def parse_value(key: str, raw: str, parse: Callable[[str], Any], check: Check) -> Any:
    try:
        value = parse(raw)
    except ValueError as exc:
        raise ConfigError(key, raw, str(exc)) from None
    problem = check(value)
    if problem:
        raise ConfigError(key, raw, problem)
    return value
