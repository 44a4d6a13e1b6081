"""Shared fixtures: one real broker (Apache Kafka) and one real Spark session per test session."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

# Every JVM the tests start (the session's Spark, each `compactor` subprocess's) compiles with
# C1 only: the tests' JVMs live seconds, and Spark starts faster so (CONTRIBUTING.md). Test
# setting only; the product leaves the JVM's defaults alone.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

# Spark's Python workers leave their working directory off sys.path (streaming.session); the
# functions tests send them live in this repository's `tests` package, found through here.
_ROOT = str(Path(__file__).resolve().parent.parent)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p)

# The classes a Spark driver loads at start, archived once (AppCDS, JDK 13+) and mapped by every
# JVM the tests start after it: a faster first Spark job in each `compactor` subprocess (the
# suite starts dozens; figures in CONTRIBUTING.md). SPARK_SUBMIT_OPTS reaches
# the driver JVM only, not spark-class's launcher with its other class path. A missing or stale
# archive is ignored by the JVM (-Xshare:auto): only start-up speed depends on it.
_CDS_WARMUP = """
import os
import sys

from streaming.session import build_session
spark = build_session({"spark.master": "local[2]", "spark.ui.enabled": "false"})
spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().toPandas()
jvm = spark.sparkContext._gateway.proc
spark.stop()
jvm.stdin.close()  # the JVM exits when its stdin closes, and writes the archive as it exits
jvm.wait(240)
staging, archive = sys.argv[1:3]
if os.path.exists(staging):  # published by this process, which holds the lock until it exits
    os.replace(staging, archive)
"""


class _ClassDataSharing:
    """The archive, made in the background while the unit tests run (they start no JVM), by
    one of pytest's workers while the others wait for it.

    The process making it holds the lock file and publishes the archive before it exits, so a
    worker waits for that process, never for another worker (which may have no JVM test)."""

    def __init__(self) -> None:
        self._making: Any = None  # subprocess.Popen while this worker has the archive made
        self._archive: Path | None = None
        self._lock: Any = None  # the open lock file of a worker waiting for another's maker

    def start(self) -> None:
        import fcntl
        import hashlib
        import subprocess
        import sys
        import tempfile

        import pyspark

        if "SPARK_SUBMIT_OPTS" in os.environ:  # the caller chose the driver's JVM options
            return
        java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
        # The JVM refuses an archive whose class path jars changed size or time (a venv made
        # again at the same path), and says so on stdout: they are part of the key.
        jars = sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar"))
        stamps = "".join(f"{j.name}{j.stat().st_size}{j.stat().st_mtime_ns}" for j in jars)
        key = hashlib.sha256(f"{java}{pyspark.__file__}{pyspark.__version__}{stamps}".encode())
        self._archive = Path(tempfile.gettempdir()) / f"compactor-tests-{key.hexdigest()[:16]}.jsa"
        if self._archive.exists():
            return
        self._lock = self._archive.with_suffix(".lock").open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another worker's process makes it: use() waits for it
            return
        if self._archive.exists():  # made while this worker looked
            self._lock.close()
            self._lock = None
            return
        staging = self._archive.with_suffix(f".{os.getpid()}.tmp")
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"-XX:ArchiveClassesAtExit={staging}"}
        # The maker inherits the lock: it is released when the maker exits, archive or not.
        self._making = subprocess.Popen(
            [sys.executable, "-c", _CDS_WARMUP, str(staging), str(self._archive)], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(self._lock.fileno(),),
            cwd=Path(__file__).resolve().parent.parent)
        self._lock.close()
        self._lock = None

    def use(self) -> None:
        """Before the first JVM: wait for the archive's maker, then hand the archive (when it
        was made) to every driver JVM."""
        import fcntl
        import subprocess

        if self._lock is not None:  # another worker's process makes it
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            self._lock.close()
            self._lock = None
        if self._making is not None:
            try:
                self._making.wait(300)
            except subprocess.TimeoutExpired:
                self._making.kill()
                self._making.wait()
            self._making = None
            for stale in Path(self._archive or ".").parent.glob("compactor-tests-*"):
                if stale != self._archive and stale.suffix in (".jsa", ".tmp"):
                    stale.unlink(missing_ok=True)  # large, made for another venv or JDK
        if self._archive is not None and self._archive.exists():
            os.environ["SPARK_SUBMIT_OPTS"] = f"-XX:SharedArchiveFile={self._archive}"
        self._archive = None  # without it: slower start-ups, same tests


_CDS = _ClassDataSharing()


def _starts_jvms(item: pytest.Item) -> bool:
    return "integration" in item.path.parts


_LONG = ("faults", "kafka_oracle", "slow")  # the longest kind first


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first: quick feedback, and time for the archive to be made meanwhile. Then
    the modules with long tests, longest kind first, so that pytest's workers do not end on
    one of them alone."""
    rank: dict[Path, int] = {}
    for item in items:
        for i, name in enumerate(_LONG):
            if item.get_closest_marker(name):
                rank[item.path] = min(rank.get(item.path, i), i)
    items.sort(key=lambda item: (_starts_jvms(item), rank.get(item.path, len(_LONG))))


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(_starts_jvms(item) for item in session.items):
        _CDS.start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if _starts_jvms(item):
        _CDS.use()


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.1)


# The broker the integration suite mirrors from: Apache Kafka ("kafka", the default) or the
# demo's embedded Tansu ("tansu"), by COMPACTOR_TEST_BROKER.
TEST_BROKER = os.environ.get("COMPACTOR_TEST_BROKER", "kafka")
if TEST_BROKER not in ("kafka", "tansu"):
    raise pytest.UsageError(
        f"COMPACTOR_TEST_BROKER={TEST_BROKER!r}: the test broker is 'kafka' or 'tansu'")
# Topic settings a test gives that Kafka would act on itself (roll, clean or delete the source
# while the mirror reads it) or refuse (segments under 1 MiB): on Kafka they reach the product
# as topic.<name>.* overrides instead, so it sees the same effective configuration.
_PRODUCT_SIDE = {"segment.bytes", "segment.ms", "retention.ms", "retention.bytes",
                 "max.compaction.lag.ms", "min.compaction.lag.ms", "delete.retention.ms",
                 "min.cleanable.dirty.ratio"}
_KAFKA_MIN_SEGMENT_BYTES = 1024 * 1024
TOPIC_OVERRIDES: dict[str, dict[str, str]] = {}


def overrides_for(topics: str) -> dict[str, str]:
    """``topic.<name>.<key>`` lines for the topics (comma-separated) whose settings Kafka
    did not get (see _PRODUCT_SIDE)."""
    return {f"topic.{t}.{k}": v for t in topics.split(",")
            for k, v in TOPIC_OVERRIDES.get(t.strip(), {}).items()}


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    if TEST_BROKER == "kafka":
        yield request.getfixturevalue("kafka")
        return
    from compactor.demo.broker import EmbeddedBroker

    with EmbeddedBroker(tmp_path_factory.mktemp("broker") / "tansu.log") as b:
        yield b
        from compactor.kafka.consumer_cache import close_kept

        close_kept()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Apache Kafka itself: one KRaft node whose cleaner the tests can watch."""
    from tests.kafka.broker import KafkaBroker

    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as b:
        yield b
        from compactor.kafka.consumer_cache import close_kept

        close_kept()  # this process's kept consumer, before its broker stops


@pytest.fixture(scope="session")
def schema_registry() -> Iterator[Any]:
    """The embedded Schema Registry (Confluent's REST API) on a free localhost port."""
    from compactor.demo.schema_registry import EmbeddedSchemaRegistry

    with EmbeddedSchemaRegistry() as registry:
        yield registry


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from streaming.session import build_session

    session = build_session({"spark.master": "local[2]", "spark.ui.enabled": "false"})
    yield session
    session.stop()


def _topic_maker(servers: str, on_kafka: bool) -> Callable[..., str]:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": servers, "log_level": 0})

    def create(partitions: int = 3, config: Mapping[str, str] | None = None,
               name: str | None = None) -> str:
        topic = name or f"t-{uuid.uuid4().hex[:12]}"
        given = dict(config or {})
        if on_kafka:
            product = {k: v for k, v in given.items() if k in _PRODUCT_SIDE and not (
                k == "segment.bytes" and int(v) >= _KAFKA_MIN_SEGMENT_BYTES)}
            TOPIC_OVERRIDES[topic] = product
            given = {k: v for k, v in given.items() if k not in product}
        admin.create_topics([NewTopic(topic, partitions, 1, config=given)])[
            topic].result(timeout=30)
        wait_until(lambda: topic in admin.list_topics(timeout=5).topics, 30, f"topic {topic}")
        return topic

    return create


@pytest.fixture
def topic_factory(broker: Any) -> Callable[..., str]:
    """Create a uniquely named topic on the test broker; returns its name."""
    return _topic_maker(broker.bootstrap_servers, TEST_BROKER == "kafka")


@pytest.fixture
def kafka_topic(kafka: Any) -> Callable[..., str]:
    """Create a uniquely named topic on Apache Kafka, whichever the test broker is."""
    return _topic_maker(kafka.bootstrap_servers, True)


@pytest.fixture
def lake_config(broker: Any, tmp_path: Path) -> Callable[..., Any]:
    """A validated CompactorConfig for one topic with its own lake and checkpoint dirs."""
    from compactor.config import build_config, resolve_config

    def make(topic: str, **extra: str) -> Any:
        raw = {
            "bootstrap.servers": broker.bootstrap_servers,
            "topics": topic,
            "lake.path": str(tmp_path / "lake"),
            "checkpoint.path": str(tmp_path / "checkpoints"),
            **overrides_for(topic),
            **{k.replace("_", "."): v for k, v in extra.items()},
        }
        return resolve_config(build_config(raw))

    return make
