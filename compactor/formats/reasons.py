"""Why a record did not decode: the rule it broke, then what the reason quotes of it.

A reason is stored with the record in ``L/T/rejected`` (its ``reason`` column), where it is
erased with the record's key and value. The same reason names the batch's first rejection in
the mirror's WARN line, and logs are copies no erasure reaches, as Kafka Connect keeps records
out of its logs unless ``errors.log.include.messages`` is set. So a reason that quotes the
record (a field's value, a decoder's message about the bytes) puts the quote last, after
:data:`QUOTING`, and :func:`loggable` leaves it out.
"""

from __future__ import annotations

QUOTING = "; quoting the record: "


def quoting(rule: str, quote: str) -> str:
    """A reason: ``rule`` (no byte of the record), then ``quote`` (what it shows of it)."""
    return f"{rule}{QUOTING}{quote}"


def loggable(reason: str) -> str:
    """``reason`` without what it quotes of the record, for logs."""
    return reason.split(QUOTING, 1)[0]
