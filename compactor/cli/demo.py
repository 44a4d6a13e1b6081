"""``compactor demo``: the whole product on an embedded broker."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser(
        "demo", help="run the whole product on an embedded broker (needs nothing else)",
        description="Start an embedded Kafka-compatible broker, produce user profiles with "
        "updates and GDPR deletions, mirror them into a lake, clean it and check the result. "
        "The story goes to stdout; every log line (Spark, Kafka clients, the compactor) goes "
        "to DIR/demo.log unless --verbose.",
    )
    demo.add_argument("--dir", default="compactor-demo", metavar="DIR",
                      help="where the lake, checkpoints and broker log go "
                      "(default ./compactor-demo, replaced on each run)")
    demo.add_argument("--users", type=int, default=20_000, help="distinct keys (default 20000)")
    demo.add_argument("--updates", type=int, default=200_000,
                      help="records to produce (default 200000)")
    demo.add_argument("--verbose", action="store_true",
                      help="show the logs of Spark, the Kafka clients and the compactor on "
                      "stderr too (by default they go to DIR/demo.log)")
    demo.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from compactor.demo.run import run_demo

    return run_demo(args.dir, users=args.users, updates=args.updates, verbose=args.verbose)
