"""The engine that mirrors and maintains a lake, as the CLI and the demo drive it.

The engine is the Spark side, in the ``streaming`` package, which uses ``compactor`` and is
never imported by it: ``compactor`` finds it through the ``compactor.engines`` entry point
the distribution declares (``spark = streaming.service:Service``), the way pytest finds its
plugins. So imports go one way, and the verbs that need no Spark never load it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import FrameType
from typing import Protocol

from compactor.cleaner.maintenance import CleaningTotals, PassReport
from compactor.config import CompactorConfig
from compactor.exceptions import CompactorError
from compactor.ingest.batch_stats import BatchStats, IngestTotals

ENGINE_GROUP = "compactor.engines"


@dataclass
class RunSummary:
    """What one ``compactor run`` did; printed as JSON by ``--json``."""

    ingest: IngestTotals = field(default_factory=IngestTotals)
    cleaning: CleaningTotals = field(default_factory=CleaningTotals)
    seconds: float = 0.0


class Engine(Protocol):
    """Runs the mirror and its maintenance for one configuration."""

    config: CompactorConfig  # resolved against the broker

    def install_signal_handlers(self) -> None: ...

    def request_stop(self, signum: int | None = None, _frame: FrameType | None = None) -> None:
        ...

    def run(
        self, once: bool = False,
        on_batch: Callable[[int, Mapping[str, BatchStats]], None] | None = None,
        on_pass: Callable[[PassReport], None] | None = None,
    ) -> RunSummary: ...

    def clean(self, topics: list[str] | None, force: bool, dry_run: bool) -> PassReport: ...

    def close(self) -> None:
        """Stop what the engine started (its Spark session), so no client outlives it."""


def load_engine(config: CompactorConfig, name: str = "spark") -> Engine:
    """The installed engine ``name``, built for ``config`` (which it resolves)."""
    found = entry_points(group=ENGINE_GROUP, name=name)
    if not found:
        raise CompactorError(
            f"no engine {name!r} is installed (entry point group {ENGINE_GROUP}): the "
            "distribution kafka-lake-compactor declares it; reinstall it (pip install -e .)"
        )
    factory: Callable[[CompactorConfig], Engine] = next(iter(found)).load()
    return factory(config)
