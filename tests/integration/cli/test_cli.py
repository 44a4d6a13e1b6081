"""``compactor`` as a process: exit codes, messages and results (kill -9 and restarts are in
``test_faults.py`` and ``streaming/test_many_partitions.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from compactor.demo.workload import Record, produce
from tests.integration.helpers import compactor, lake_offsets, write_config


@pytest.mark.parametrize(("values", "expected"), [
    ({"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "100"},
     "max.compaction.lag.ms (topic t)=100: must be >= min.compaction.lag.ms (5000)"),
    ({"min.cleanable.dirty.ratio": "2"}, "min.cleanable.dirty.ratio='2': must be between 0 and 1"),
    ({"segment.bytez": "1"},
     "segment.bytez='1': is not a known configuration key (did you mean 'segment.bytes'?)"),
    ({"kafka.fetch.wait.max.msec": "100"}, "kafka.fetch.wait.max.msec='100': librdkafka "
     'refuses it: No such configuration property: "fetch.wait.max.msec"'),
    ({"kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"},
     "kafka.ssl.truststore.location='/etc/kafka/truststore.jks': is a Java client setting "
     "librdkafka does not have (use kafka.ssl.ca.location"),
])
def test_bad_config_exits_2_with_one_clear_message(tmp_path, values, expected) -> None:
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "127.0.0.1:1", "topics": "t", "lake.path": str(tmp_path / "l"),
        **values})
    result = compactor("run", "--config", str(conf), "--once")
    assert result.returncode == 2
    assert expected in result.stderr.replace("\n", " ")
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_missing_required_key_exits_2(tmp_path) -> None:
    conf = write_config(tmp_path / "c.properties", topics="t")
    result = compactor("run", "--config", str(conf))
    assert result.returncode == 2 and "bootstrap.servers: is required" in result.stderr


def test_unreachable_broker_exits_3(tmp_path) -> None:
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "127.0.0.1:7", "topics": "t", "lake.path": str(tmp_path / "l")})
    # The command-line override wins over the file.
    result = compactor("run", "--config", str(conf), "--once", "--bootstrap-servers",
                       "127.0.0.1:9")
    assert result.returncode == 3
    assert "cannot reach Kafka at bootstrap.servers=127.0.0.1:9" in result.stderr
    assert "Traceback" not in result.stderr


def _offsets(lake: Path, topic: str) -> list[tuple[int, int]]:
    return lake_offsets(str(lake / topic / "log"))


@pytest.mark.slow
def test_a_spark_cluster_master_and_file_uris(broker, topic_factory, tmp_path) -> None:
    """Executors in their own JVMs and Python workers (Spark's local-cluster master) write
    the same lake as a local master would; lake.path and checkpoint.path as file:// URIs."""
    topic = topic_factory(2, {"cleanup.policy": "compact"})
    records = [Record(f"k{i % 50}".encode(), f"v{i}".encode(), i % 2) for i in range(600)]
    produce(broker.bootstrap_servers, topic, records)
    lake = tmp_path / "lake"
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": lake.as_uri(), "checkpoint.path": (tmp_path / "ck").as_uri(),
        "spark.master": "local-cluster[2,1,1024]", "spark.ui.enabled": "false"})
    result = compactor("run", "--config", str(conf), "--once", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["ingest"]["records"] == 600
    assert sorted(_offsets(lake, topic)) == sorted((p, o) for p in (0, 1) for o in range(300))
    # The session was stopped before exit: no executor was reported lost.
    assert "Lost executor" not in result.stderr


def test_json_on_stdout_survives_the_jvm_writing_to_stdout(broker, topic_factory,
                                                          tmp_path) -> None:
    """The driver JVM inherits the process's stdout, and its unified logging writes there (a
    CDS archive it cannot map, GC logs a user turned on): that goes to stderr, and stdout
    keeps the one JSON document."""
    topic = topic_factory(1, {"cleanup.policy": "compact"})
    produce(broker.bootstrap_servers, topic, [Record(b"k", b"v", 0)])
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": broker.bootstrap_servers, "topics": topic,
        "lake.path": str(tmp_path / "lake"), "spark.master": "local[1]",
        "spark.ui.enabled": "false"})
    driver_opts = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Xlog:gc".strip()
    result = compactor("run", "--config", str(conf), "--once", "--json",
                       env={**os.environ, "SPARK_SUBMIT_OPTS": driver_opts})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "[gc]" in result.stderr  # the JVM did write its log, and not to stdout
    assert json.loads(result.stdout)["ingest"]["records"] == 1


def test_secrets_stay_out_of_output(tmp_path) -> None:
    secret = "s3cr3t-Pa55w0rd"
    conf = write_config(tmp_path / "c.properties", **{
        "bootstrap.servers": "127.0.0.1:9", "topics": "t", "lake.path": str(tmp_path / "l"),
        "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.username": "mirror", "kafka.sasl.password": secret,
        "kafka.ssl.key.password": secret, "kafka.socket.timeout.ms": "3000"})
    # No broker there: run fails (3), status answers from the lake (describe-config redacts:
    # test_describe_config.py).
    for verb, code in ((["run", "--once"], 3), (["status"], 0)):
        result = compactor("--log-level", "DEBUG", *verb, "--config", str(conf))
        assert result.returncode == code, (verb, result.stderr[-2000:])
        assert secret not in result.stdout + result.stderr, verb
