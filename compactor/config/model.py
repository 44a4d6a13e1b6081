"""The typed, frozen configuration objects that flow through the code after load."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from compactor.config.keys import CLEANER_KEYS, LONG_MAX, PIPELINE_KEYS, TOPIC_KEYS, default
from compactor.exceptions import ConfigError
from compactor.formats import TopicFormat
from compactor.formats.spec import REGISTRY_FORMATS
from compactor.lake.storage import LOCAL, Storage

DOWNSTREAM_KEY_FORMATS = ("bytes", "string", "json", *sorted(REGISTRY_FORMATS))

TABLE_MERGE_DEFAULT_MS = 10_000


@dataclass(frozen=True)
class TopicConfig:
    """The effective Kafka topic configuration of one mirrored topic."""

    name: str
    cleanup_policy: frozenset[str] = default(TOPIC_KEYS, "cleanup.policy")
    segment_bytes: int = default(TOPIC_KEYS, "segment.bytes")
    segment_ms: int = default(TOPIC_KEYS, "segment.ms")
    min_cleanable_dirty_ratio: float = default(TOPIC_KEYS, "min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = default(TOPIC_KEYS, "min.compaction.lag.ms")
    max_compaction_lag_ms: int = default(TOPIC_KEYS, "max.compaction.lag.ms")
    delete_retention_ms: int = default(TOPIC_KEYS, "delete.retention.ms")
    retention_ms: int = default(TOPIC_KEYS, "retention.ms")
    retention_bytes: int = default(TOPIC_KEYS, "retention.bytes")
    vacuum_grace: int = default(TOPIC_KEYS, "vacuum.grace.ms")  # -1: see vacuum_grace_ms
    erasure_ledger_retention_ms: int = default(TOPIC_KEYS, "erasure.ledger.retention.ms")
    table_change_data_feed: bool = default(TOPIC_KEYS, "table.change.data.feed")
    # The pipeline's trigger.interval.ms: how long a tombstone may wait to reach the lake.
    trigger_interval_ms: int = 0
    # key -> where its value came from: "topic override", "file", "broker", "broker default",
    # "kafka default". Shown by describe-config.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def value(self, key: str) -> Any:
        """The effective value of topic key ``key`` as Kafka writes it."""
        if key == "vacuum.grace.ms":
            return self.vacuum_grace_ms
        value = getattr(self, TOPIC_KEYS[key].field)
        return ",".join(sorted(value)) if key == "cleanup.policy" else value

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def vacuum_grace_ms(self) -> int:
        """The vacuum grace; by default it leaves three quarters of the max lag for the rest."""
        if self.vacuum_grace >= 0:
            return self.vacuum_grace
        return min(3_600_000, self.max_compaction_lag_ms // 4)

    @property
    def erasure_deadline(self) -> bool:
        """A compacted topic with a max lag promises physical erasure within it."""
        return self.compact and self.max_compaction_lag_ms < LONG_MAX

    @property
    def erasure_deadline_ms(self) -> int | None:
        """How long after its tombstone a key's old values must be physically gone; None for
        a topic without an erasure deadline. The one rule every reader of deadlines uses."""
        return self.max_compaction_lag_ms if self.erasure_deadline else None

    @property
    def pass_allowance_ms(self) -> int:
        """Time reserved inside the deadline for waking up, a cleaning pass, its commit, and
        the micro-batch commits it may wait behind."""
        return max(3000, self.max_compaction_lag_ms // 5)

    @property
    def cleaning_lag_ms(self) -> int:
        """When a dirty record must be cleaned so that it is *physically* gone by the max lag.

        Planned backwards from max.compaction.lag.ms = M: vacuum needs the grace G after the
        cleaning commit, and the pass itself an allowance A, so cleaning is forced at
        M - G - A. Without a max lag this is Kafka's (infinite) max lag. When M is too short
        for G + A, cleaning is forced at once: 0 (:attr:`deadline_best_effort`).
        """
        if not self.erasure_deadline:
            return self.max_compaction_lag_ms
        return max(0, self.max_compaction_lag_ms - self.vacuum_grace_ms - self.pass_allowance_ms)

    @property
    def table_lag_ms(self) -> int:
        """How long a latest-value table may wait to MERGE a tombstone that reached the lake,
        for a topic with an erasure deadline: the cleaning lag less the trigger interval the
        tombstone may have waited for its micro-batch, so that the table's rewrite, like the
        log's cleaning, is done M - G - A after the tombstone (0: after every micro-batch)."""
        return max(0, self.cleaning_lag_ms - self.trigger_interval_ms)

    @property
    def deadline_best_effort(self) -> bool:
        """A max lag Kafka accepts but shorter than the vacuum grace plus a pass allowance, or
        a minimum lag or a trigger interval the cleaning lag cannot absorb.

        Such a topic is mirrored like any other, its segments roll and are cleaned as soon as
        possible, and its erasures are timed against M as usual (missed ones are counted);
        only the promise that each is physically gone by M cannot be made. A tombstone that
        reaches the lake within the cleaning lag, in a segment the minimum lag lets the cleaner
        take by then, is cleaned on the plan's time; a later one is cleaned when it can be, a
        pass and a grace before the vacuum deletes its values, which can be after M.
        """
        return self._best_effort_because is not None

    @property
    def _best_effort_because(self) -> str | None:
        """Which rule makes the deadline best effort: ``max_lag``, ``min_lag``, ``trigger``."""
        if not self.erasure_deadline:
            return None
        if self.cleaning_lag_ms == 0:
            return "max_lag"
        if self.min_compaction_lag_ms > 0 and self.min_compaction_lag_ms >= self.cleaning_lag_ms:
            return "min_lag"
        if self.trigger_interval_ms > self.cleaning_lag_ms:
            return "trigger"
        return None

    @property
    def deadline_warning(self) -> str | None:
        """The warning shown at start, by ``status``, ``describe-config`` and a metric."""
        because = self._best_effort_because
        if because is None:
            return None
        lead = f"erasure deadline of {self.name} is best effort: "
        lag = (f"the {self.cleaning_lag_ms} ms that max.compaction.lag.ms="
               f"{self.max_compaction_lag_ms} leaves before cleaning is due (less the vacuum "
               f"grace, {self.vacuum_grace_ms} ms, and a cleaning pass allowance, "
               f"{self.pass_allowance_ms} ms)")
        if because == "min_lag":
            return (f"{lead}min.compaction.lag.ms={self.min_compaction_lag_ms} is not shorter "
                    f"than {lag}, so a tombstone's segment may not be cleaned in time; its "
                    "segments are cleaned as soon as the minimum lag allows and missed "
                    "deadlines are counted. For a kept deadline, lower min.compaction.lag.ms "
                    f"below {self.cleaning_lag_ms} or raise max.compaction.lag.ms")
        if because == "trigger":
            return (f"{lead}trigger.interval.ms={self.trigger_interval_ms} is longer than "
                    f"{lag}, so a tombstone can reach the lake after its partition had to be "
                    "cleaned; such tombstones are cleaned as they arrive and missed deadlines "
                    "are counted. For a kept deadline, lower trigger.interval.ms to "
                    f"{self.cleaning_lag_ms} or less, or raise max.compaction.lag.ms")
        return (f"{lead}max.compaction.lag.ms={self.max_compaction_lag_ms} is shorter than the "
                f"vacuum grace ({self.vacuum_grace_ms} ms) plus a cleaning pass allowance "
                f"({self.pass_allowance_ms} ms); its segments are cleaned as soon as possible "
                "and missed deadlines are counted. For a kept deadline, raise "
                f"max.compaction.lag.ms above {self.vacuum_grace_ms + self.pass_allowance_ms}"
                " or lower vacuum.grace.ms")

    @property
    def roll_ms(self) -> int:
        """KIP-354: a compacted topic with a max lag rolls by min(segment.ms, cleaning lag),
        less ``min.compaction.lag.ms``: a segment is cleanable once its newest record is that
        old, so one that spans no more than the cleaning lag less the minimum lag is cleanable
        when its first record's cleaning is due.

        At least 1 ms: a best-effort topic rolls its active segment at every micro-batch.
        """
        if self.erasure_deadline:
            return min(self.segment_ms,
                       max(1, self.cleaning_lag_ms - self.min_compaction_lag_ms))
        return self.segment_ms


@dataclass(frozen=True)
class DownstreamTable:
    """A Delta table derived from a topic, whose rows each tombstone must delete."""

    name: str
    topic: str
    path: str
    key_column: str
    key_format: str = "string"  # one of DOWNSTREAM_KEY_FORMATS
    json_field: str | None = None  # the key's field that is the column (json:<field>, ...)
    registry: Mapping[str, str] = field(default_factory=dict, compare=False)
    # Columns the user declared free of personal data: the only ones the table may keep
    # statistics on (statistics live in its transaction log, beyond any row delete).
    stats_columns: tuple[str, ...] = ()

    def key_value(self, key: bytes) -> object | None:
        """The table's key for a Kafka key; None when the key cannot map (never deletes)."""
        return self.key_values([key])[0]

    def key_values(self, keys: list[bytes]) -> list[object | None]:
        """:meth:`key_value` of each key; registry formats decode them all at once."""
        if self.key_format in REGISTRY_FORMATS:
            from compactor.formats.records import decode_keys

            return decode_keys(keys, self.key_format, self.json_field, self.topic,
                               self.registry)
        return [self._plain(key) for key in keys]

    def _plain(self, key: bytes) -> object | None:
        if self.key_format == "bytes":
            return key
        try:
            text = key.decode("utf-8")
            if self.key_format == "string":
                return text
            import json

            doc = json.loads(text)
            return doc.get(self.json_field) if isinstance(doc, dict) else None
        except (UnicodeDecodeError, ValueError):
            return None


@dataclass(frozen=True)
class CleanerConfig:
    """Broker-wide ``log.cleaner.*`` settings."""

    enable: bool = default(CLEANER_KEYS, "log.cleaner.enable")
    threads: int = default(CLEANER_KEYS, "log.cleaner.threads")
    backoff_ms: int = default(CLEANER_KEYS, "log.cleaner.backoff.ms")
    dedupe_buffer_size: int = default(CLEANER_KEYS, "log.cleaner.dedupe.buffer.size")
    io_buffer_load_factor: float = default(CLEANER_KEYS, "log.cleaner.io.buffer.load.factor")
    io_max_bytes_per_second: float = default(CLEANER_KEYS,
                                             "log.cleaner.io.max.bytes.per.second")


class TopicConfigs(Mapping[str, TopicConfig]):
    """Each mirrored topic's effective config: the one part of the configuration a running
    mirror changes, as it follows the broker's topic configs
    (:mod:`compactor.config.follow`). A topic's frozen :class:`TopicConfig` is replaced
    whole, so a reader sees its old or its new config, never a mix."""

    def __init__(self, configs: Mapping[str, TopicConfig] | None = None) -> None:
        self._configs = dict(configs or {})

    def __getitem__(self, name: str) -> TopicConfig:
        return self._configs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)

    def replace(self, tc: TopicConfig) -> None:
        """Put ``tc`` in place of its topic's config."""
        self._configs[tc.name] = tc


@dataclass(frozen=True)
class CompactorConfig:
    """Validated settings of one compactor deployment.

    ``topic_configs`` is empty until :func:`~compactor.config.resolve_config` has asked the
    broker; a running mirror keeps it current (:class:`TopicConfigs`).
    """

    bootstrap_servers: str
    topics: tuple[str, ...]
    lake_path: str
    checkpoint_path: str
    trigger_interval_ms: int = default(PIPELINE_KEYS, "trigger.interval.ms")
    max_offsets_per_trigger: int = default(PIPELINE_KEYS, "max.offsets.per.trigger")
    history_retention_ms: int = default(PIPELINE_KEYS, "history.retention.ms")
    min_partitions: int = default(PIPELINE_KEYS, "min.partitions")
    max_records_per_partition: int = default(PIPELINE_KEYS, "max.records.per.partition")
    starting_offsets: str = default(PIPELINE_KEYS, "starting.offsets")
    fail_on_data_loss: bool = default(PIPELINE_KEYS, "fail.on.data.loss")
    # -1: TABLE_MERGE_DEFAULT_MS within the deadline
    table_merge_interval_ms: int = default(PIPELINE_KEYS, "table.merge.interval.ms")
    catalog_register: bool = default(PIPELINE_KEYS, "catalog.register")
    catalog_database: str = default(PIPELINE_KEYS, "catalog.database")
    catalog_table_prefix: str = default(PIPELINE_KEYS, "catalog.table.prefix")
    metrics_port: int = default(PIPELINE_KEYS, "metrics.port")
    commit_offsets: bool = default(PIPELINE_KEYS, "commit.offsets")  # for lag tools
    group_id: str = default(PIPELINE_KEYS, "group.id")
    config_refresh_interval_ms: int = default(PIPELINE_KEYS, "config.refresh.interval.ms")
    kafka: Mapping[str, str] = field(default_factory=dict)
    spark: Mapping[str, str] = field(default_factory=dict)
    storage: Storage = LOCAL  # lake.storage.*: delta-rs storage options for remote lakes
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    topic_configs: TopicConfigs = field(default_factory=TopicConfigs)
    downstream: tuple[DownstreamTable, ...] = ()
    formats: Mapping[str, TopicFormat] = field(default_factory=dict)  # topic -> its formats
    # Typed user-given topic values: "" -> every topic, topic name -> that topic, and
    # "log" -> broker-wide defaults keyed by the topic key they default.
    topic_layers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    # Keys whose value in the file was a ${env:...} / ${file:...} reference, as written: what
    # describe-config shows instead of the secret.
    written: Mapping[str, str] = field(default_factory=dict, repr=False)

    def topic(self, name: str) -> TopicConfig:
        try:
            return self.topic_configs[name]
        except KeyError:
            raise ConfigError(
                "topic", name, "is not one of the configured topics", f"topics={self.topics}"
            ) from None

    def format(self, topic: str) -> TopicFormat:
        """How ``topic``'s keys and values are decoded (bytes when not configured)."""
        return self.formats.get(topic) or TopicFormat()

    @property
    def schema_registry(self) -> Mapping[str, str]:
        """The Schema Registry client's settings (``schema.registry.*``); every topic's
        formats carry the same mapping, so that write tasks receive it with their plan."""
        return next(iter(self.formats.values())).registry if self.formats else {}

    def table_merge_ms(self, topic: str) -> int:
        """How long ``topic``'s latest-value table may lag its log.

        Each MERGE rewrites every table file holding a key it touches, so merging after every
        micro-batch writes the table again and again. Merging every few seconds batches those
        rewrites, as Kafka Streams' record cache does with ``commit.interval.ms``. A topic with an
        erasure deadline never waits past its :attr:`TopicConfig.table_lag_ms`, so a tombstone
        leaves the table in time (0 when even that is best effort: after every micro-batch).
        """
        tc = self.topic(topic)
        interval = self.table_merge_interval_ms
        if interval < 0:
            interval = TABLE_MERGE_DEFAULT_MS
        if tc.erasure_deadline:
            interval = min(interval, tc.table_lag_ms)
        return interval

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings: the ``kafka.*`` pass-through plus bootstrap.servers."""
        return {**self.kafka, "bootstrap.servers": self.bootstrap_servers}
