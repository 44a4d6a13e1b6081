"""``compactor read``: a topic's log or latest values from the lake, like kcat."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from compactor.cli.common import overrides

log = logging.getLogger("compactor")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    read = sub.add_parser(
        "read", help="print a topic's compacted log (or latest values) from the lake, like kcat",
        description="Print the records of TOPIC's compacted log in the lake, partition by "
        "partition in offset order, as JSON lines or CSV; --latest prints the latest-value "
        "table instead. One Delta version is read; the offsets where it ends (where to go on "
        "consuming from Kafka) are logged to stderr. An offset compaction removed starts at "
        "the next record that exists, as in Kafka.",
    )
    read.add_argument("--config", required=True, metavar="FILE",
                      help="the properties file of 'compactor run'")
    read.add_argument("--lake", metavar="PATH", help="override lake.path")
    read.add_argument("--topic", required=True, help="the mirrored topic")
    read.add_argument("--from-offset", metavar="P:O,...",
                      help="start partition P at offset O (others from the log start)")
    read.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    read.add_argument("--key-format", choices=["topic", "string", "hex", "base64", "json"],
                      default="topic", help="how to print keys; 'topic' (default): decoded "
                      "with the topic's key.format (avro, json, ...), or as a UTF-8 string")
    read.add_argument("--value-format", choices=["topic", "string", "hex", "base64", "json"],
                      default="topic", help="how to print values; 'topic' (default): decoded "
                      "with the topic's value.format, or as a UTF-8 string. A record that "
                      "does not decode is printed as base64 with a value_error field")
    read.add_argument("--latest", action="store_true",
                      help="the latest-value table: one row per live key")
    read.set_defaults(func=command)


def _decoders(config: Any, args: argparse.Namespace) -> tuple[Any, str, str]:
    """The decoders ``--key-format topic`` / ``--value-format topic`` ask for, and the byte
    formats for the rest (a UTF-8 string where the topic keeps bytes)."""
    from compactor.formats.records import decoders_for

    key, value = decoders_for(args.topic, config.format(args.topic))
    key = key if args.key_format == "topic" else None
    value = value if args.value_format == "topic" else None
    key_format = "string" if args.key_format == "topic" else args.key_format
    value_format = "string" if args.value_format == "topic" else args.value_format
    return (key, value), key_format, value_format


def command(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from compactor.kafka.schema import KAFKA_SCHEMA
    from compactor.lake.bootstrap import open_latest, open_log
    from compactor.lake.reader import parse_from_offsets, write

    config = load_config(args.config, overrides(args))
    if args.topic not in config.topics:
        print(f"compactor: error: --topic {args.topic!r} is not mirrored by this configuration "
              f"(topics={','.join(config.topics)})", file=sys.stderr)
        return 2
    starts = parse_from_offsets(args.from_offset)
    decoders, key_format, value_format = _decoders(config, args)
    if args.latest:
        if starts:
            print("compactor: error: --from-offset applies to the log, not to --latest",
                  file=sys.stderr)
            return 2
        latest = open_latest(config.lake_path, args.topic,
                             storage_options=config.storage.options)
        batches = latest.table.sort_by([("partition", "ascending"), ("offset", "ascending")])
        if any(decoders):  # decoded like the log's records; its typed columns are the same
            batches = batches.select(KAFKA_SCHEMA.names)
        count = write(batches.to_batches(), sys.stdout, args.format, key_format,
                      value_format, decoders)
        version, ends = latest.version, latest.next_offsets
    else:
        snap = open_log(config.lake_path, args.topic, storage_options=config.storage.options)
        count = write(snap.batches(starts), sys.stdout, args.format, key_format,
                      value_format, decoders)
        version, ends = snap.version, snap.next_offsets
    sys.stdout.flush()
    log.info("%d records from version %d of %s; next offsets to consume from Kafka: %s",
             count, version, "the table" if args.latest else "the log",
             ",".join(f"{p}:{o}" for p, o in sorted(ends.items())) or "none")
    return 0
