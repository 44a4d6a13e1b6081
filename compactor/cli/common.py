"""What every verb that reads a configuration shares: its flags and their overrides."""

from __future__ import annotations

import argparse


def overrides(args: argparse.Namespace) -> dict[str, str]:
    out: dict[str, str] = {}
    if getattr(args, "bootstrap_servers", None):
        out["bootstrap.servers"] = args.bootstrap_servers
    if isinstance(getattr(args, "topic", None), list):  # run and clean: --topic repeats
        out["topics"] = ",".join(args.topic)
    if getattr(args, "lake", None):
        out["lake.path"] = args.lake
    return out


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """Options every verb that reads a configuration takes."""
    parser.add_argument("--config", required=True, metavar="FILE",
                        help="a .properties file (see conf/example.properties)")
    parser.add_argument("--lake", metavar="PATH", help="override lake.path")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
