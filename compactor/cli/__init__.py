"""The ``compactor`` command: one subcommand per verb.

Results go to stdout, logs to stderr. Exit codes: 0 done, 1 failure, 2 bad configuration or
usage, 3 Kafka unreachable, 4 lake unreadable or a commit refused, 5 data loss, 130 interrupted
before anything ran; audit-erasure also uses 1 (traces past their deadline) and 6 (traces
within their deadline).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict

from compactor.exceptions import CompactorError

log = logging.getLogger("compactor")

EPILOG = """\
examples:
  compactor demo                                  # everything on this machine, ~1 minute
  compactor run --config conf/compactor.properties        # mirror and clean until Ctrl-C
  compactor run --config conf/compactor.properties --once # catch up, clean, then exit
  compactor clean --config conf/compactor.properties --dry-run  # what is due now
"""


def _overrides(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    if getattr(args, "bootstrap_servers", None):
        out["bootstrap.servers"] = args.bootstrap_servers
    if isinstance(getattr(args, "topic", None), list):  # run and clean: --topic repeats
        out["topics"] = ",".join(args.topic)
    if getattr(args, "lake", None):
        out["lake.path"] = args.lake
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from streaming.service import Service

    config = load_config(args.config, _overrides(args))
    service = Service(config)
    service.install_signal_handlers()
    summary = service.run(once=args.once)
    if args.json:
        print(json.dumps(asdict(summary), sort_keys=True))
    else:
        ingest, cleaning = summary.ingest, summary.cleaning
        print(f"mirrored {ingest.records} records ({ingest.record_bytes} bytes) in "
              f"{ingest.batches} micro-batches, {ingest.rejected} rejected, "
              f"{summary.seconds:.1f}s")
        for topic, records in sorted(ingest.per_topic.items()):
            print(f"  {topic}: {records} records")
        print(f"cleaned {cleaning.partitions_cleaned} partitions in {cleaning.passes} "
              f"passes: {cleaning.records_dropped} records dropped, {cleaning.bytes_rewritten} "
              f"bytes rewritten, {cleaning.files_vacuumed} files vacuumed")
    return 0


def _cmd_clean(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from streaming.service import Service

    config = load_config(args.config, _overrides(args))
    report = Service(config).clean(args.topic, force=args.force, dry_run=args.dry_run)
    rows = []
    for o in sorted(report.outcomes, key=lambda o: (o.topic, o.partition)):
        r = o.range
        stats = o.result.stats if o.result is not None else None
        if o.result is not None and o.result.error:
            action = "uncleanable"
        elif o.committed:
            action = "cleaned"
        elif args.dry_run and (r.eligible or args.force):
            action = "would clean"
        else:
            action = "not due"
        rows.append({
            "topic": o.topic, "partition": o.partition, "action": action,
            "first_dirty_offset": r.first_dirty_offset,
            "first_uncleanable_offset": r.first_uncleanable_offset,
            "dirty_ratio": round(r.dirty_ratio, 4), "must_clean": r.must_clean,
            "max_compaction_delay_ms": r.max_compaction_delay_ms,
            "checkpoint": o.result.checkpoint if o.result is not None else None,
            "records_dropped": stats.records_dropped if stats else 0,
            "tombstones_removed": stats.tombstones_dropped if stats else 0,
            "bytes_read": stats.bytes_read if stats else 0,
            "bytes_written": stats.bytes_written if stats else 0,
            "error": o.result.error if o.result is not None else None,
        })
    if args.json:
        print(json.dumps({"partitions": rows, "files_vacuumed": report.vacuumed,
                          "seconds": round(report.seconds, 3)}, sort_keys=True))
    else:
        print(f"{'topic':<20} {'part':>4} {'action':<12} {'dirty':>7} {'ratio':>6} "
              f"{'overdue':>7} {'dropped':>8} {'written':>10}")
        for row in rows:
            dirty = f"{row['first_dirty_offset']}..{row['first_uncleanable_offset']}"
            print(f"{row['topic']:<20} {row['partition']:>4} {row['action']:<12} {dirty:>7} "
                  f"{row['dirty_ratio']:>6.2f} {'yes' if row['must_clean'] else 'no':>7} "
                  f"{row['records_dropped']:>8} {row['bytes_written']:>10}")
            if row["error"]:
                print(f"    error: {row['error']}")
        print(f"{report.vacuumed} files vacuumed in {report.seconds:.1f}s")
    return 1 if any(r["action"] == "uncleanable" for r in rows) else 0


def _cmd_audit(args: argparse.Namespace) -> int:
    import time

    from compactor.config import load_config
    from compactor.erasure.audit import audit_key
    from compactor.kafka.admin import resolve_config

    if (args.key is None) == (args.key_hex is None):
        print("compactor: error: give exactly one of --key and --key-hex", file=sys.stderr)
        return 2
    try:
        key = args.key.encode() if args.key is not None else bytes.fromhex(args.key_hex)
    except ValueError:
        print(f"compactor: error: --key-hex {args.key_hex!r} is not hexadecimal", file=sys.stderr)
        return 2
    config = resolve_config(load_config(args.config, _overrides(args)))
    config.topic(args.topic)
    result = audit_key(config, args.topic, key)
    now = int(time.time() * 1000)
    overdue = result.overdue(now)
    code = 1 if overdue else (6 if result.traces else 0)
    if args.json:
        print(json.dumps({
            "topic": args.topic, "key_hex": key.hex(), "files_searched": result.files_searched,
            "latest": {str(p): {"offset": o, "timestamp_ms": ts, "tombstone": t}
                       for p, (o, ts, t) in sorted(result.latest.items())},
            "traces": [{**asdict(t), "overdue": t in overdue} for t in result.traces],
            "status": {0: "erased", 1: "overdue", 6: "pending"}[code],
        }, sort_keys=True))
    else:
        print(f"searched {result.files_searched} files under {args.topic}/ for key {key!r}")
        for p, (o, _ts, tomb) in sorted(result.latest.items()):
            print(f"  partition {p}: current record at offset {o}"
                  f"{' (a tombstone)' if tomb else ''}")
        for t in result.traces:
            when = ("no deadline" if t.deadline_ms is None else
                    f"due by {time.strftime('%H:%M:%S', time.localtime(t.deadline_ms / 1000))}")
            state = "OVERDUE" if t in overdue else "pending"
            print(f"  {state}: {t.path} (partition {t.partition}, offset {t.offset}): "
                  f"{t.what}, {when}")
        print({0: "nothing superseded remains", 1: f"{len(overdue)} traces past their deadline",
               6: f"{len(result.traces)} traces remain, all within their deadline"}[code])
    return code


def _cmd_read(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from compactor.lake.reader import parse_from_offsets, write
    from compactor.lake.snapshot import open_latest, open_log

    config = load_config(args.config, _overrides(args))
    if args.topic not in config.topics:
        print(f"compactor: error: --topic {args.topic!r} is not mirrored by this configuration "
              f"(topics={','.join(config.topics)})", file=sys.stderr)
        return 2
    starts = parse_from_offsets(args.from_offset)
    if args.latest:
        if starts:
            print("compactor: error: --from-offset applies to the log, not to --latest",
                  file=sys.stderr)
            return 2
        latest = open_latest(config.lake_path, args.topic,
                             storage_options=config.storage.options)
        batches = latest.table.sort_by([("partition", "ascending"), ("offset", "ascending")])
        count = write(batches.to_batches(), sys.stdout, args.format, args.key_format,
                      args.value_format)
        version, ends = latest.version, latest.next_offsets
    else:
        snap = open_log(config.lake_path, args.topic, storage_options=config.storage.options)
        count = write(snap.batches(starts), sys.stdout, args.format, args.key_format,
                      args.value_format)
        version, ends = snap.version, snap.next_offsets
    sys.stdout.flush()
    log.info("%d records from version %d of %s; next offsets to consume from Kafka: %s",
             count, version, "the table" if args.latest else "the log",
             ",".join(f"{p}:{o}" for p, o in sorted(ends.items())) or "none")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    import time

    from compactor.config import load_config, with_topic_configs
    from compactor.ops.status import collect_status, status_json, status_table

    config = load_config(args.config, _overrides(args))
    try:
        from compactor.kafka.admin import resolve_config

        config = resolve_config(config)
    except CompactorError as exc:
        # The lake alone still answers; topic configs fall back to the file and Kafka's defaults.
        log.warning("broker unreachable, using the file's topic configs: %s", exc)
        config = with_topic_configs(config, {})
    while True:
        now = int(time.time() * 1000)
        topics, broker_error = collect_status(config, now)
        if args.json:
            print(json.dumps(status_json(topics, broker_error, now), sort_keys=True), flush=True)
        else:
            if args.watch:
                print("\033[2J\033[H", end="")  # clear the terminal, as watch(1) does
            print(status_table(topics, broker_error, now), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)


_SECRET = ("password", "secret", "token", "key.pem", "private", "credential",
           # object storage: AWS_ACCESS_KEY_ID, AZURE_STORAGE_ACCOUNT_KEY, SAS keys, ...
           "access_key", "account_key", "sas_key", "service_account_key")


def _redact(key: str, value: str) -> str:
    """Secrets never reach stdout: passwords, tokens, private keys, JAAS configs."""
    lowered = key.lower()
    if any(word in lowered for word in _SECRET) or "jaas" in lowered:
        return "[redacted]"
    return value


def _cmd_describe_config(args: argparse.Namespace) -> int:
    from compactor.config import TOPIC_KEYS, load_config
    from compactor.kafka.admin import resolve_config

    config = resolve_config(load_config(args.config, _overrides(args)))
    topics = args.topic or list(config.topics)
    pipeline: dict[str, object] = {
        "bootstrap.servers": config.bootstrap_servers, "lake.path": config.lake_path,
        "checkpoint.path": config.checkpoint_path,
        "trigger.interval.ms": config.trigger_interval_ms,
        "max.offsets.per.trigger": config.max_offsets_per_trigger,
        "starting.offsets": config.starting_offsets,
        "fail.on.data.loss": config.fail_on_data_loss,
        "table.merge.interval.ms": config.table_merge_interval_ms,
        "metrics.port": config.metrics_port,
        **{f"kafka.{k}": _redact(k, v) for k, v in sorted(config.kafka.items())},
        **{k: _redact(k, v) for k, v in sorted(config.spark.items())},
        **{f"lake.storage.{k}": _redact(k, v) for k, v in sorted(config.storage.options.items())},
    }
    described: dict[str, dict[str, dict[str, object]]] = {}
    for name in topics:
        tc = config.topic(name)
        values = {
            "cleanup.policy": ",".join(sorted(tc.cleanup_policy)),
            "segment.bytes": tc.segment_bytes, "segment.ms": tc.segment_ms,
            "min.cleanable.dirty.ratio": tc.min_cleanable_dirty_ratio,
            "min.compaction.lag.ms": tc.min_compaction_lag_ms,
            "max.compaction.lag.ms": tc.max_compaction_lag_ms,
            "delete.retention.ms": tc.delete_retention_ms, "retention.ms": tc.retention_ms,
            "retention.bytes": tc.retention_bytes, "vacuum.grace.ms": tc.vacuum_grace_ms,
        }
        described[name] = {
            key: {"value": values[key], "source": tc.sources.get(key, "kafka default")}
            for key in TOPIC_KEYS
        }
    if args.json:
        print(json.dumps({"pipeline": pipeline, "topics": described}, sort_keys=True))
        return 0
    for key, value in pipeline.items():
        print(f"{key} = {value}")
    for name, entries in described.items():
        print(f"\ntopic {name}")
        for key, entry in entries.items():
            print(f"  {key:<28} {str(entry['value']):<22} ({entry['source']})")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from compactor.ops.demo import run_demo

    return run_demo(args.dir, users=args.users, updates=args.updates)


def _common(parser: argparse.ArgumentParser) -> None:
    """Options every verb that reads a configuration takes."""
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="a .properties file (see conf/example.properties)")
    parser.add_argument("--lake", metavar="PATH", help="override lake.path")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactor",
        description="Mirror Kafka topics into Delta Lake and keep the mirror compacted with "
        "Kafka's log-cleaner semantics.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="verbosity of the logs on stderr (default INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser(
        "run", help="mirror the configured topics into the lake and keep them compacted",
        description="Mirror the configured topics into L/<topic>/log and clean them with "
        "Kafka's log-cleaner rules until Ctrl-C or SIGTERM, which stop after the current "
        "commit. With --once, mirror what is available now, run every cleaning that is due, "
        "and exit 0.",
    )
    _common(run)
    run.add_argument("--once", action="store_true",
                     help="process everything available now, then exit")
    run.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                     help="override bootstrap.servers")
    run.add_argument("--topic", action="append", metavar="TOPIC",
                     help="override topics (repeat for several)")
    run.set_defaults(func=_cmd_run)

    clean = sub.add_parser(
        "clean", help="run one cleaning pass now",
        description="Run one log-cleaner pass over the lake now: compaction of the due "
        "partitions (Kafka's rules), retention, and vacuum of files past their grace period. "
        "Exit 1 when a partition could not be cleaned.",
    )
    _common(clean)
    clean.add_argument("--topic", action="append", metavar="TOPIC",
                       help="only this topic (repeat for several)")
    clean.add_argument("--force", action="store_true",
                       help="clean every partition with dirty data, due or not (the active "
                       "segment and min.compaction.lag.ms are still respected)")
    clean.add_argument("--dry-run", action="store_true",
                       help="show what would be cleaned; change nothing")
    clean.set_defaults(func=_cmd_clean)

    status = sub.add_parser(
        "status", help="lag, segments, dirty ratio, deadlines and erasure backlog per partition",
        description="Show, for every mirrored partition, the broker's end offset and the "
        "mirror's lag, the log's segments, what is dirty and whether cleaning is overdue, the "
        "next forced cleaning, and per topic the erasure backlog. Reads the Delta logs, so it "
        "works beside a running 'compactor run'. --json prints the documented JSON form.",
    )
    _common(status)
    status.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    status.set_defaults(func=_cmd_status)

    describe = sub.add_parser(
        "describe-config", help="the effective configuration and where each value came from",
        description="Print each topic's effective Kafka topic configuration and its source "
        "(topic override, file, broker, broker default (file), kafka default), and the "
        "pipeline's settings. Passwords, secrets, tokens and private keys are redacted.",
    )
    _common(describe)
    describe.add_argument("--topic", action="append", metavar="TOPIC",
                          help="only this topic (repeat for several)")
    describe.set_defaults(func=_cmd_describe_config)

    audit = sub.add_parser(
        "audit-erasure", help="find superseded values of a key still on disk",
        description="Search every file of a topic's lake (Parquet decoded, Delta logs byte for "
        "byte) for values of KEY that a newer record superseded, and report where they remain "
        "and by when they must be gone. Exit 0: nothing remains; 1: traces past their "
        "deadline; 6: traces remain, all within their deadline.",
    )
    _common(audit)
    audit.add_argument("--topic", required=True, help="the mirrored topic")
    audit.add_argument("--key", help="the key as UTF-8 text")
    audit.add_argument("--key-hex", help="the key as hexadecimal bytes")
    audit.set_defaults(func=_cmd_audit)

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
    read.add_argument("--key-format", choices=["string", "hex", "base64", "json"],
                      default="string", help="how to print keys (default UTF-8 string)")
    read.add_argument("--value-format", choices=["string", "hex", "base64", "json"],
                      default="string", help="how to print values and header values")
    read.add_argument("--latest", action="store_true",
                      help="the latest-value table: one row per live key")
    read.set_defaults(func=_cmd_read)

    demo = sub.add_parser(
        "demo", help="run the whole product on an embedded broker (needs nothing else)",
        description="Start an embedded Kafka-compatible broker, produce user profiles with "
        "updates and GDPR deletions, mirror them into a lake, clean it and check the result.",
    )
    demo.add_argument("--dir", default="compactor-demo", metavar="DIR",
                      help="where the lake, checkpoints and broker log go "
                      "(default ./compactor-demo, replaced on each run)")
    demo.add_argument("--users", type=int, default=20_000, help="distinct keys (default 20000)")
    demo.add_argument("--updates", type=int, default=200_000,
                      help="records to produce (default 200000)")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except CompactorError as exc:
        print(f"compactor: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("compactor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout left (compactor read | head)
        return 0


def _stop_spark() -> None:
    """Stop a Spark session the verb started, so cluster executors end cleanly, not lost."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        try:
            session.stop()
        except Exception as exc:  # the result is already printed; only say why
            log.debug("stopping Spark: %s", exc)


def entry() -> None:
    """The console script: run a verb, then leave without native teardown.

    All output is flushed and every commit is durable by now. Interpreter finalization can
    then abort in native code ("terminate called without an active exception": deltalake
    1.6.6 and pyarrow 26 after librdkafka retried an unreachable broker), which would turn
    a result a script must trust into exit code 134. Spark's gateway JVM exits by itself when
    its driver process ends.
    """
    code = main()
    _stop_spark()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a closed pipe: nothing more can be said there
            stream.flush()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entry()
