"""``compactor rebuild-table``: make a topic's latest-value table again from its log."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from compactor.cli.common import add_config_options, overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rebuild = sub.add_parser(
        "rebuild-table", help="rebuild a topic's latest-value table from its log",
        description="Make L/T/table again from L/T/log with the key and value formats the "
        "configuration declares now (after a schema fix, records rejected before decode "
        "again), and drop the dead letters in L/T/rejected of records that decode now. Stop "
        "'compactor run' first: the rebuild claims the topic, so a run still mirroring it "
        "stops at its next commit. Erased values do not come back: the log no longer holds "
        "them.",
    )
    add_config_options(rebuild)
    rebuild.add_argument("--topic", required=True, help="the mirrored topic")
    rebuild.add_argument("--batch", type=int, default=100_000, metavar="N",
                         help="at most N offsets of a partition per MERGE (default 100000): "
                         "bounds the memory of the rebuild")
    rebuild.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from compactor.config.resolve import resolve_topic
    from compactor.exceptions import ConfigError
    from compactor.lake.table_rebuild import rebuild_table

    if args.batch < 1:
        raise ConfigError("--batch", args.batch, "must be a positive whole number")
    config = load_config(args.config, overrides(args))
    if args.topic not in config.topics:  # no broker asked: the log is all a rebuild reads
        raise ConfigError("--topic", args.topic, "is not one of the configured topics",
                          f"topics={','.join(config.topics)}")
    # table.change.data.feed is the product's own key: the file says it, no broker needed.
    change_feed = resolve_topic(config, args.topic, {}).table_change_data_feed
    result = rebuild_table(config.lake_path, args.topic, config.storage,
                           config.format(args.topic), args.batch, change_feed)
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"rebuilt the latest-value table of {result.topic} from {result.records} log "
              f"records: {result.rows} rows; {result.dead_letters_dropped} dead letters "
              f"dropped, in {result.seconds:.1f}s")
    return 0
