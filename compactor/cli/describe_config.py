"""``compactor describe-config``: effective values and where each came from."""

from __future__ import annotations

import argparse
import json

from compactor.cli.common import add_config_options, overrides
from compactor.kafka.client_config import redacted


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    describe = sub.add_parser(
        "describe-config", help="the effective configuration and where each value came from",
        description="Print each topic's effective Kafka topic configuration and its source "
        "(topic override, file, broker, broker default (file), kafka default, compactor "
        "default), and the pipeline's settings. Passwords, secrets, tokens and private keys "
        "are redacted.",
    )
    add_config_options(describe)
    describe.add_argument("--topic", action="append", metavar="TOPIC",
                          help="only this topic (repeat for several)")
    describe.set_defaults(func=command)


def _registry_value(key: str, value: str) -> str:
    """basic.auth.user.info is 'user:password': the user is shown, the password is not."""
    if key == "basic.auth.user.info" and ":" in value:
        return value.split(":", 1)[0] + ":[redacted]"
    return redacted(key, value)


def command(args: argparse.Namespace) -> int:
    from compactor.config import PIPELINE_KEYS, TOPIC_KEYS, load_config, resolve_config

    config = resolve_config(load_config(args.config, overrides(args)))
    topics = args.topic or list(config.topics)
    pipeline: dict[str, object] = {
        **{name: (",".join(config.topics) if name == "topics" else getattr(config, spec.field))
           for name, spec in PIPELINE_KEYS.items()},
        **{f"kafka.{k}": redacted(k, v) for k, v in sorted(config.kafka.items())},
        **{k: redacted(k, v) for k, v in sorted(config.spark.items())},
        **{f"lake.storage.{k}": redacted(k, v) for k, v in sorted(config.storage.options.items())},
        **{f"schema.registry.{k}": _registry_value(k, v)
           for k, v in sorted(config.schema_registry.items())},
    }
    for d in config.downstream:
        field = f":{d.json_field}" if d.json_field else ""
        pipeline |= {f"downstream.{d.name}.path": d.path, f"downstream.{d.name}.topic": d.topic,
                     f"downstream.{d.name}.key.column": d.key_column,
                     f"downstream.{d.name}.key.format": d.key_format + field}
    # A value from ${env:...} or ${file:...} is shown as written, never as what it resolved to.
    pipeline |= {k: v for k, v in config.written.items() if k in pipeline}
    described: dict[str, dict[str, dict[str, object]]] = {}
    for name in topics:
        tc = config.topic(name)
        described[name] = {
            key: {"value": tc.value(key), "source": tc.sources.get(key, "kafka default")}
            for key in TOPIC_KEYS
        }
        fmt = config.format(name)
        for side, rf in (("key", fmt.key), ("value", fmt.value)):
            described[name][f"{side}.format"] = {"value": rf.name, "source": "file" if rf.typed
                                                 else "default"}
            if rf.schema:
                described[name][f"{side}.schema"] = {"value": rf.schema, "source": "file"}
    warnings = {name: w for name in topics if (w := config.topic(name).deadline_warning)}
    merge_ms = {name: config.table_merge_ms(name) for name in topics}
    if args.json:
        print(json.dumps({"pipeline": pipeline, "topics": described, "warnings": warnings,
                          "table_merge_ms": merge_ms}, sort_keys=True))
        return 0
    for key, value in pipeline.items():
        print(f"{key} = {_text(value)}")
    for name, entries in described.items():
        print(f"\ntopic {name}")
        for key, entry in entries.items():
            print(f"  {key:<28} {_text(entry['value']):<22} ({entry['source']})")
        print(f"  {'latest-value table lag':<28} {f'<= {merge_ms[name]} ms':<22} "
              "(table.merge.interval.ms, within the erasure deadline)")
        if name in warnings:
            print(f"  WARNING: {warnings[name]}")
    return 0


def _text(value: object) -> str:
    """A value as a properties file writes it (``true``, not Python's ``True``)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, frozenset | set):
        return ",".join(sorted(str(v) for v in value))
    return str(value)
