"""Reading the lake back the way a user would: plain deltalake."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from compactor.lake.layout import topic_paths


def log_table(config: Any, topic: str) -> pa.Table:
    return DeltaTable(topic_paths(config.lake_path, topic).log).to_pyarrow_table().sort_by(
        [("partition", "ascending"), ("offset", "ascending")])


def rejected_table(config: Any, topic: str) -> pa.Table:
    return DeltaTable(topic_paths(config.lake_path, topic).rejected).to_pyarrow_table()


def log_version(config: Any, topic: str) -> int:
    return DeltaTable(topic_paths(config.lake_path, topic).log).version()


def run_once(config: Any) -> Any:
    from streaming.service import Service

    service = Service(config)
    return service.run(once=True)


def find_markers(root: str, markers: list[bytes]) -> dict[bytes, list[str]]:
    """Every file under ``root`` holding each marker: Parquet decoded, other files raw."""
    import os

    import pyarrow.parquet as pq

    found: dict[bytes, list[str]] = {m: [] for m in markers}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                blobs = [fh.read()]
            if name.endswith(".parquet"):
                try:
                    table = pq.read_table(path)
                except Exception:
                    table = None
                if table is not None:
                    blobs = [repr(table.to_pylist()).encode()]
            for marker in markers:
                if any(marker in blob for blob in blobs):
                    found[marker].append(path)
    return found


@contextmanager
def running(service: Any) -> Iterator[list[BaseException]]:
    """``service.run()`` in a thread for the block; yields the list its failure lands in."""
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            service.run()
        except BaseException as exc:  # the caller asserts on the list
            failures.append(exc)

    worker = threading.Thread(target=serve, daemon=True)
    worker.start()
    try:
        yield failures
    finally:
        service.request_stop()
        worker.join(120)


def created(table_path: str | Path) -> bool:
    """Whether the table's first commit is there: its ``_delta_log`` folder appears before it."""
    return Path(table_path, "_delta_log", f"{0:020d}.json").exists()


def lake_offsets(log_path: str) -> list[tuple[int, int]]:
    """Every (partition, offset) of a log table, as stored."""
    t = DeltaTable(log_path).to_pyarrow_dataset().to_table(columns=["partition", "offset"])
    return list(zip(t.column("partition").to_pylist(), t.column("offset").to_pylist(),
                    strict=True))


def compactor(*args: str, timeout: float = 300,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compactor.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def write_config(path: Path, **values: str) -> Path:
    from tests.conftest import overrides_for

    values = {**overrides_for(values.get("topics", "")), **values}
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def recreate_topic(broker: Any, topic_factory: Any, topic: str, records: int) -> None:
    """Delete ``topic``, create it again with one partition and produce ``records`` to it."""
    from confluent_kafka.admin import AdminClient

    from compactor.demo.workload import Record, produce
    from tests.conftest import wait_until

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(timeout=30)
    wait_until(lambda: topic not in admin.list_topics(timeout=5).topics, 30, "topic deletion")
    topic_factory(1, name=topic)
    produce(broker.bootstrap_servers, topic,
            [Record(b"new-%d" % i, b"v", 0) for i in range(records)])


def alter_topic(servers: str, topic: str, values: Mapping[str, str]) -> None:
    """Set topic configs on the broker (IncrementalAlterConfigs), as an operator would."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in values.items()])
    admin.incremental_alter_configs([resource])[resource].result(30)
