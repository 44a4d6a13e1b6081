"""``compactor status``: lag, segments, dirt, deadlines and erasure backlog."""

from __future__ import annotations

import argparse
import json
import logging

from compactor.cli.common import add_config_options, overrides
from compactor.exceptions import CompactorError

log = logging.getLogger("compactor")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = sub.add_parser(
        "status", help="lag, segments, dirty ratio, deadlines and erasure backlog per partition",
        description="Show, for every mirrored partition, the broker's end offset and the "
        "mirror's lag, the log's segments, what is dirty and whether cleaning is overdue, the "
        "next forced cleaning, and per topic the erasure backlog. Reads the Delta logs, so it "
        "works beside a running 'compactor run'. --json prints the documented JSON form.",
    )
    add_config_options(status)
    status.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until Ctrl-C")
    status.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    import time

    from compactor.config import load_config, with_topic_configs
    from compactor.erasure.ledger import ErasureLedger
    from compactor.ops.status import BrokerEnds, collect_status, status_json, status_table

    config = load_config(args.config, overrides(args))
    unreachable: str | None = None
    try:
        from compactor.config import resolve_config

        config = resolve_config(config)
    except CompactorError as exc:
        # The lake alone still answers; topic configs fall back to the file and Kafka's defaults.
        log.warning("broker unreachable, using the file's topic configs: %s", exc)
        config = with_topic_configs(config, {})
        unreachable = str(exc)
    ledger = ErasureLedger(config)  # kept: --watch reads only the ledger's new commits
    broker = BrokerEnds(config)  # kept: --watch asks through one consumer, not one a refresh
    while True:
        now = int(time.time() * 1000)
        # A broker that just failed to answer is not asked again for offsets (another timeout
        # to wait out); --watch asks again at each refresh, as it may be back.
        topics, broker_error = collect_status(config, now, ask_broker=unreachable is None,
                                              ledger=ledger, broker=broker)
        if unreachable is not None:
            broker_error, unreachable = unreachable, None
        if args.json:
            print(json.dumps(status_json(topics, broker_error, now), sort_keys=True), flush=True)
        else:
            if args.watch:
                print("\033[2J\033[H", end="")  # clear the terminal, as watch(1) does
            print(status_table(topics, broker_error, now), flush=True)
        if not args.watch:
            return 0
        time.sleep(args.watch)
