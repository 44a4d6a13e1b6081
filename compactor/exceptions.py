"""Every error the product raises on purpose derives from :class:`CompactorError`.

Messages give the value, the rule it broke and what to do, because they are read by an
operator at 3 a.m., not by the author. The CLI maps each class to an exit code.
"""

from __future__ import annotations

import re

# The documented "interrupted": Ctrl-C to a verb other than run, or a second stop signal.
INTERRUPTED_EXIT = 130


class CompactorError(Exception):
    """Root of the product's errors; ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class ConfigError(CompactorError):
    """A configuration value broke a rule; nothing was started."""

    exit_code = 2

    def __init__(self, key: str, value: object, rule: str, hint: str = "") -> None:
        self.key = key
        self.value = value
        self.rule = rule
        # A key with no value at all reads "lake.path: is required", not "lake.path=None".
        shown = key if value is None else f"{key}={value!r}"
        message = f"invalid configuration: {shown}: {rule}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class BrokerUnavailableError(CompactorError):
    """The Kafka cluster could not be reached or answered with an error."""

    exit_code = 3


class LakeError(CompactorError):
    """A Delta table under the lake root could not be read or committed."""

    exit_code = 4


class DataLossError(CompactorError):
    """Offsets the mirror still needed are gone from Kafka (retention, or a recreated topic)."""

    exit_code = 5


class BrokerNotInstalledError(CompactorError):
    """The embedded broker binary (the ``demo`` extra) is not installed."""

    exit_code = 2


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def one_line(text: str) -> str:
    """delta-rs's multi-line error chains (coloured, each cause on a line behind ``↳``) as
    one line, causes joined by ': '."""
    parts = [line.strip().lstrip("↳").strip() for line in _ANSI.sub("", text).splitlines()]
    return ": ".join(p for p in parts if p)
