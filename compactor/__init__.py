"""kafka-lake-compactor: Kafka topics mirrored into Delta Lake, compacted as Kafka would.

The names below load on first use (PEP 562), so importing a part of the package (the command
line, :mod:`compactor.cli`) loads pyarrow only when that part needs it: the command line
picks Arrow's allocator before pyarrow loads (:mod:`compactor.ops.arrow_pool`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compactor.config import CompactorConfig, TopicConfig, build_config, load_config
    from compactor.exceptions import CompactorError
    from compactor.lake.bootstrap import LatestSnapshot, LogSnapshot, open_latest, open_log

_WHERE = {
    "CompactorConfig": "compactor.config", "TopicConfig": "compactor.config",
    "build_config": "compactor.config", "load_config": "compactor.config",
    "CompactorError": "compactor.exceptions",
    "LatestSnapshot": "compactor.lake.bootstrap", "LogSnapshot": "compactor.lake.bootstrap",
    "open_latest": "compactor.lake.bootstrap", "open_log": "compactor.lake.bootstrap",
}

__all__ = [
    "CompactorConfig", "CompactorError", "LatestSnapshot", "LogSnapshot", "TopicConfig",
    "build_config", "load_config", "open_latest", "open_log",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'compactor' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # found once
    return value
