"""``compactor report``: keeping up, compaction on time, erasures in time, over days."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from compactor.cli.common import add_config_options, overrides
from compactor.exceptions import CompactorError

log = logging.getLogger(__name__)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report", help="draw a topic's history: keeping up, compaction, erasures",
        description="Draw, per topic, the mirror's delay and throughput, the compaction delay "
        "against max.compaction.lag.ms, and every erasure against its deadline over a window, "
        "from the lake's own history (L/T/history, kept by 'compactor run', and the erasure "
        "ledger), as <topic>-report.png and <topic>-report.html. Prints the files' paths, or "
        "the figures with --json. The broker is not needed.",
    )
    add_config_options(report)
    report.add_argument("--topic", action="append", metavar="TOPIC",
                        help="only this topic (repeat for several)")
    report.add_argument("--since", default="24h", metavar="WINDOW",
                        help="how far back: 90m, 24h, 7d (default 24h)")
    report.add_argument("--out", default=".", metavar="DIR",
                        help="where the PNG and HTML files go (default: here)")
    report.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    import time

    from compactor.config import load_config, resolve_config, with_topic_configs
    from compactor.ops.report import collect, parse_since, render

    window = parse_since(args.since)
    config = load_config(args.config, overrides(args))
    try:
        config = resolve_config(config)
    except CompactorError as exc:  # the lake alone answers; deadlines from the file's configs
        log.warning("broker unreachable, using the file's topic configs: %s", exc)
        config = with_topic_configs(config, {})
    now = int(time.time() * 1000)
    summaries = []
    for topic in args.topic or config.topics:
        report = collect(config, topic, now - window, now)
        summary = report.summary()
        if not args.json:
            png, page = render(report, Path(args.out))
            summary |= {"png": str(png), "html": str(page)}
            print(f"{topic}: {png} {page}")
        summaries.append(summary)
    if args.json:
        print(json.dumps({"topics": summaries}, sort_keys=True))
    return 0
