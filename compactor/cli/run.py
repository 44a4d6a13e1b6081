"""``compactor run``: mirror the topics and keep them compacted until stopped."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from compactor.cli.common import add_config_options, overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run", help="mirror the configured topics into the lake and keep them compacted",
        description="Mirror the configured topics into L/<topic>/log and clean them with "
        "Kafka's log-cleaner rules until Ctrl-C or SIGTERM, which stop after the current "
        "commit. With --once, mirror what is available now, run every cleaning that is due, "
        "and exit 0.",
    )
    add_config_options(run)
    run.add_argument("--once", action="store_true",
                     help="process everything available now, then exit")
    run.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                     help="override bootstrap.servers")
    run.add_argument("--topic", action="append", metavar="TOPIC",
                     help="override topics (repeat for several)")
    run.set_defaults(func=command, graceful_stop=True)


def command(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from compactor.ops.engine import load_engine

    config = load_config(args.config, overrides(args))
    service = load_engine(config)
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
