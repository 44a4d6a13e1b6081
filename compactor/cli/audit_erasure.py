"""``compactor audit-erasure``: where superseded values of one key remain on disk."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from compactor.cli.common import add_config_options, overrides

EXIT_CODES = {"erased": 0, "overdue": 1, "pending": 6, "pending-no-deadline": 7}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser(
        "audit-erasure", help="find superseded values of a key still on disk",
        description="Search every file of a topic's lake (Parquet decoded, Delta logs byte for "
        "byte) for values of KEY that a newer record superseded, and report where they remain "
        "and by when they must be gone. Exit 0: nothing remains; 1: traces past their "
        "deadline; 6: traces remain, all within their deadline; 7: traces remain and none is "
        "overdue, but some have no deadline (the topic sets no max.compaction.lag.ms).",
    )
    add_config_options(audit)
    audit.add_argument("--topic", required=True, help="the mirrored topic")
    audit.add_argument("--key", help="the key as UTF-8 text")
    audit.add_argument("--key-hex", help="the key as hexadecimal bytes")
    audit.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    import time

    from compactor.config import load_config, resolve_config
    from compactor.erasure.audit import audit_key

    if (args.key is None) == (args.key_hex is None):
        print("compactor: error: give exactly one of --key and --key-hex", file=sys.stderr)
        return 2
    try:
        key = args.key.encode() if args.key is not None else bytes.fromhex(args.key_hex)
    except ValueError:
        print(f"compactor: error: --key-hex {args.key_hex!r} is not hexadecimal", file=sys.stderr)
        return 2
    config = resolve_config(load_config(args.config, overrides(args)))
    config.topic(args.topic)
    result = audit_key(config, args.topic, key)
    now = int(time.time() * 1000)
    overdue = result.overdue(now)
    status = result.status(now)
    code = EXIT_CODES[status]
    if args.json:
        print(json.dumps({
            "topic": args.topic, "key_hex": key.hex(), "files_searched": result.files_searched,
            "latest": {str(p): {"offset": o, "timestamp_ms": ts, "tombstone": t}
                       for p, (o, ts, t) in sorted(result.latest.items())},
            "traces": [{**asdict(t), "overdue": t in overdue} for t in result.traces],
            "status": status,
        }, sort_keys=True))
    else:
        print(f"searched {result.files_searched} files under {args.topic}/ for key {key!r}")
        for p, (o, _ts, tomb) in sorted(result.latest.items()):
            print(f"  partition {p}: current record at offset {o}"
                  f"{' (a tombstone)' if tomb else ''}")
        for t in result.traces:
            if t.never or t.deadline_ms is None:
                when = "should not exist" if t.never else "no deadline"
            else:
                stamp = time.localtime(t.deadline_ms / 1000)
                when = f"due by {time.strftime('%Y-%m-%d %H:%M:%S', stamp)}"
            state = "OVERDUE" if t in overdue else "pending"
            print(f"  {state}: {t.path} (partition {t.partition}, offset {t.offset}): "
                  f"{t.what}, {when}")
        print({"erased": "nothing superseded remains",
               "overdue": f"{len(overdue)} traces past their deadline",
               "pending": f"{len(result.traces)} traces remain, all within their deadline",
               "pending-no-deadline": f"{len(result.traces)} traces remain; the topic sets no "
               "max.compaction.lag.ms, so they have no deadline"}[status])
    return code
