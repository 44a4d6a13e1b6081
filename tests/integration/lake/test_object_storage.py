"""A lake on object storage: ``lake.path=s3://...`` against a real S3 API (moto's server).

Every part of the product that touches the lake goes through it: the ingest tasks upload
data files, the cleaner reads and rewrites them, vacuum deletes them, the erasure audit lists
and reads every object, and ``compactor read`` serves the snapshot; the Spark checkpoint stays
on a local path, as the README says it must without Hadoop's S3 connector.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable

from compactor.demo.workload import Record, produce
from compactor.lake.segments import read_partition_logs
from tests.conftest import wait_until
from tests.integration.helpers import compactor, free_port, write_config

BUCKET = "lake"


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """An S3 endpoint with one bucket; the delta-rs storage options that reach it."""
    import boto3

    port = free_port()
    log = (tmp_path_factory.mktemp("moto") / "moto.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or _listening(port), 60, "moto's S3 server")
        assert proc.poll() is None, "moto's S3 server exited"
        options = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true",
                   "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                   "AWS_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"], region_name="us-east-1",
                     aws_access_key_id="test", aws_secret_access_key="test",
                     ).create_bucket(Bucket=BUCKET)
        yield options
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _objects(options: dict[str, str], prefix: str) -> list[str]:
    import boto3

    client = boto3.client("s3", endpoint_url=options["AWS_ENDPOINT_URL"],
                          region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    return keys


@pytest.mark.slow
def test_a_lake_on_s3_is_mirrored_cleaned_vacuumed_audited_and_read(
        broker, topic_factory, s3, tmp_path: Path) -> None:
    topic = topic_factory(1, {"cleanup.policy": "compact", "segment.bytes": "3000",
                              "min.cleanable.dirty.ratio": "0.01",
                              "delete.retention.ms": "1000"})
    records = [Record(f"user-{i % 40}".encode(), f"v{i}".encode(), 0) for i in range(400)]
    records += [Record(f"user-{k}".encode(), None, 0) for k in range(5)]  # erase five users
    produce(broker.bootstrap_servers, topic, records)
    prefix = f"{uuid.uuid4().hex[:8]}/lake"
    lake = f"s3://{BUCKET}/{prefix}"
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic, "lake.path": lake,
        "checkpoint.path": str(tmp_path / "ck"), "vacuum.grace.ms": "1000",
        "spark.master": "local[2]", "spark.ui.enabled": "false",
        **{f"lake.storage.{k}": v for k, v in s3.items()}})

    first = compactor("run", "--config", str(conf), "--once", "--json")
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads(first.stdout)["ingest"]["records"] == len(records)
    log_uri = f"{lake}/{topic}/log"
    table = DeltaTable(log_uri, storage_options=s3)
    plog = read_partition_logs(table)[0]
    assert plog.committed_offset == len(records) - 1
    assert (plog.cleaner_offset or 0) > 0, "the cleaner did not clean the S3 log"
    rows = table.to_pyarrow_dataset().to_table(columns=["offset", "key", "value"]).to_pylist()
    offsets = [r["offset"] for r in rows]
    assert len(offsets) == len(set(offsets)) and len(rows) < len(records)
    latest = {}
    for offset, r in enumerate(records):
        latest[r.key] = (offset, r.value)
    lake_latest = {}
    for r in sorted(rows, key=lambda r: r["offset"]):
        assert (r["key"], r["value"]) == (records[r["offset"]].key, records[r["offset"]].value)
        lake_latest[r["key"]] = (r["offset"], r["value"])
    assert {k: v for k, v in lake_latest.items() if v[1] is not None} == \
        {k: v for k, v in latest.items() if v[1] is not None}

    # The files the cleaner replaced are deleted from the bucket by a run once their grace has
    # passed. A run may clean again itself (time passed: a segment rolled, tombstones'
    # horizon), and what it replaces has a grace of its own: runs go on until one replaces
    # nothing.
    live = {uri.split(f"{BUCKET}/", 1)[1] for uri in table.file_uris()}
    for _ in range(5):
        removed_at = max(h["timestamp"] for h in table.history())
        time.sleep(max(0.0, (removed_at + 1500) / 1000 - time.time()))
        again = compactor("run", "--config", str(conf), "--once")
        assert again.returncode == 0, again.stderr[-3000:]
        table = DeltaTable(log_uri, storage_options=s3)
        before, live = live, {uri.split(f"{BUCKET}/", 1)[1] for uri in table.file_uris()}
        if live == before:
            break
    stored = {k for k in _objects(s3, f"{prefix}/{topic}/log/") if "_delta_log" not in k}
    assert stored == live, f"{len(stored - live)} replaced data files left in the bucket"

    # The erasure audit lists and reads every object under the topic.
    audit = compactor("audit-erasure", "--config", str(conf), "--topic", topic,
                      "--key", "user-0", "--json")
    # The topic sets no max.compaction.lag.ms: what remains has no deadline (exit 7).
    assert audit.returncode in (0, 7), audit.stderr[-2000:]
    found = json.loads(audit.stdout)
    assert found["files_searched"] > len(stored)  # data files and the Delta log's objects
    assert found["latest"]["0"]["tombstone"] is True
    superseded = sorted(r["offset"] for r in table.to_pyarrow_dataset().to_table(
        columns=["offset", "key", "value"]).to_pylist()
        if r["key"] == b"user-0" and r["value"] is not None)
    assert sorted(t["offset"] for t in found["traces"] if t["table"] == "log") == superseded

    # A snapshot read from the bucket gives the same records as deltalake does.
    read = compactor("read", "--config", str(conf), "--topic", topic)
    assert read.returncode == 0, read.stderr[-2000:]
    assert sorted(json.loads(line)["offset"] for line in read.stdout.splitlines()) == \
        sorted(r["offset"] for r in table.to_pyarrow_dataset().to_table(
            columns=["offset"]).to_pylist())
    status = compactor("status", "--config", str(conf), "--json")
    assert status.returncode == 0, status.stderr[-2000:]
    part = json.loads(status.stdout)["topics"][0]["partitions"][0]
    assert part["mirrored_offset"] == len(records) and part["log_end_offset"] == len(records)
