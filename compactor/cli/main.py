"""The ``compactor`` command: the parser, exit codes and the console script.

One module per verb beside this one (faust's habit) adds its subcommand.

Results go to stdout, logs to stderr. Exit codes: 0 done, 1 failure, 2 bad configuration or
usage, 3 Kafka unreachable, 4 lake unreadable or a commit refused, 5 data loss, 130 interrupted
(a verb other than run, or a second signal); audit-erasure also uses 1 (traces past their
deadline), 6 (traces within their deadline) and 7 (traces without a deadline: the topic sets
no max lag).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
from collections.abc import Sequence

from compactor.cli import (
    audit_erasure,
    clean,
    demo,
    describe_config,
    early_stop,
    read,
    rebuild_table,
    report,
    run,
    status,
)
from compactor.exceptions import INTERRUPTED_EXIT, CompactorError, one_line
from compactor.ops.metrics import installed_version

log = logging.getLogger("compactor")
LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]

EPILOG = """\
examples:
  compactor demo                                  # everything on this machine, ~1 minute
  compactor run --config conf/compactor.properties        # mirror and clean until Ctrl-C
  compactor run --config conf/compactor.properties --once # catch up, clean, then exit
  compactor clean --config conf/compactor.properties --dry-run  # what is due now
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactor",
        description="Mirror Kafka topics into Delta Lake and keep the mirror compacted with "
        "Kafka's log-cleaner semantics.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {installed_version('kafka-lake-compactor')}")
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS,
                        help="verbosity of the logs on stderr (default INFO)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for verb in (run, clean, status, describe_config, audit_erasure, read, report,
                 rebuild_table, demo):
        verb.add_parser(sub)
    for verb_parser in sub.choices.values():  # global flags after the verb too
        verb_parser.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS,
                                 help="as before the verb")
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
        early_stop.for_verb(graceful=getattr(args, "graceful_stop", False))
        return int(args.func(args))
    except early_stop.StopRequested as stop:
        print(f"compactor: received {stop}: stopped before anything started, nothing written",
              file=sys.stderr)
        return 0
    except CompactorError as exc:
        print(f"compactor: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("compactor: interrupted", file=sys.stderr)
        return INTERRUPTED_EXIT
    except BrokenPipeError:  # the reader of stdout left (compactor read | head)
        return 0


def _keep_stdout_for_results() -> None:
    """Give this process's results a private copy of stdout and point fd 1 at stderr.

    Child processes inherit fd 1, and Spark's JVM writes its own warnings there (unified
    logging's default output: "Unable to use shared archive", a deprecated option in
    JAVA_TOOL_OPTIONS), which would corrupt the one JSON document a script parses from
    ``--json``. After this only Python's ``sys.stdout`` reaches the real stdout.
    """
    try:
        sys.stdout.flush()
        results = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError):  # no stdout or stderr to speak of: nothing to separate
        return
    sys.stdout = io.TextIOWrapper(
        io.FileIO(results, "w"), encoding=sys.stdout.encoding, errors=sys.stdout.errors,
        line_buffering=bool(getattr(sys.stdout, "line_buffering", False)))


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


def console() -> None:
    """The console script's body: run a verb, then leave without native teardown.

    All output is flushed and every commit is durable by now. Interpreter finalization can
    then abort in native code ("terminate called without an active exception": deltalake
    1.6.6 and pyarrow 26 after librdkafka retried an unreachable broker), which would turn
    a result a script must trust into exit code 134. Spark's gateway JVM exits by itself when
    its driver process ends.
    """
    _keep_stdout_for_results()
    code = main()
    _stop_spark()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):  # a closed pipe: nothing more can be said there
            stream.flush()
    logging.shutdown()
    os._exit(code)
