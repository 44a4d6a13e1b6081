"""Errors of decoding: the registry being unreachable is the only one that stops the mirror.

A record that cannot be decoded is not an error here: it becomes a row of ``L/T/rejected``
with its reason. An unreachable registry is different: nothing can be decided about any
record, so the micro-batch fails before anything is committed and ``compactor run`` exits 3.
"""

from __future__ import annotations

from compactor.exceptions import CompactorError


class SchemaRegistryUnavailableError(CompactorError):
    """The Schema Registry did not answer (after the client's own retries)."""

    exit_code = 3

    @classmethod
    def at(cls, url: str, cause: BaseException) -> SchemaRegistryUnavailableError:
        return cls(
            f"the Schema Registry at {url} did not answer ({type(cause).__name__}: {cause}); "
            "no record was judged without it and nothing of the micro-batch was committed. "
            "Check schema.registry.url and that the registry is up, then start 'compactor "
            "run' again: it resumes where the lake stopped")
