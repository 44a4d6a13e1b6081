"""``compactor clean``: one cleaning pass now, or what it would do (``--dry-run``)."""

from __future__ import annotations

import argparse
import json

from compactor.cli.common import add_config_options, overrides


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    clean = sub.add_parser(
        "clean", help="run one cleaning pass now",
        description="Run one log-cleaner pass over the lake now: compaction of the due "
        "partitions (Kafka's rules), retention, and vacuum of files past their grace period. "
        "Exit 1 when a partition could not be cleaned.",
    )
    add_config_options(clean)
    clean.add_argument("--topic", action="append", metavar="TOPIC",
                       help="only this topic (repeat for several)")
    clean.add_argument("--force", action="store_true",
                       help="clean every partition with dirty data, due or not (the active "
                       "segment and min.compaction.lag.ms are still respected)")
    clean.add_argument("--dry-run", action="store_true",
                       help="show what would be cleaned; change nothing")
    clean.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from compactor.config import load_config
    from compactor.ops.engine import load_engine

    config = load_config(args.config, overrides(args))
    if args.dry_run:  # plans only: no engine (and no JVM) needed to say what would be done
        from compactor.cleaner.maintenance import LogMaintenance
        from compactor.config import resolve_config

        report = LogMaintenance(None, resolve_config(config)).run_pass(
            args.topic, force=args.force, dry_run=True)
    else:
        report = load_engine(config).clean(args.topic, force=args.force, dry_run=False)
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
            "why": r.why(),
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
            elif row["action"] in ("not due", "would clean"):
                print(f"    {row['why']}")
        print(f"{report.vacuumed} files vacuumed in {report.seconds:.1f}s")
    return 1 if any(r["action"] == "uncleanable" for r in rows) else 0
