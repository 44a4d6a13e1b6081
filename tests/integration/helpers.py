"""Reading the lake back the way a user would: plain deltalake."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from compactor.layout import topic_paths


def log_table(config: Any, topic: str) -> pa.Table:
    return DeltaTable(topic_paths(config.lake_path, topic).log).to_pyarrow_table().sort_by(
        [("partition", "ascending"), ("offset", "ascending")])


def rejected_table(config: Any, topic: str) -> pa.Table:
    return DeltaTable(topic_paths(config.lake_path, topic).rejected).to_pyarrow_table()


def log_version(config: Any, topic: str) -> int:
    return DeltaTable(topic_paths(config.lake_path, topic).log).version()


def run_once(config: Any) -> Any:
    from compactor.service import Service

    service = Service(config)
    return service.run(once=True)
