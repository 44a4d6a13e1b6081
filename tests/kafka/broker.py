"""Apache Kafka for the tests: one KRaft node (broker and controller) on loopback.

Its jars come from Maven Central, fetched once with Maven (``tests/kafka/pom.xml``) into a
cache shared by every checkout of this machine: ``$KAFKA_LAKE_COMPACTOR_CACHE``, default
``~/.cache/kafka-lake-compactor``. Storage is formatted in a fresh directory per node; the
cleaner and retention are set to run within a second, so tests can watch Kafka's own cleaner.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

from tests.cache import cache_dir, made_once

POM = Path(__file__).with_name("pom.xml")
LOG4J = Path(__file__).with_name("log4j2.properties")


def kafka_version() -> str:
    text = POM.read_text()
    return text.split("<kafka.version>", 1)[1].split("</kafka.version>", 1)[0]


def kafka_libs() -> Path:
    """The directory of Kafka's jars and their dependencies, fetched on first use."""
    libs = cache_dir() / f"kafka-{kafka_version()}" / "libs"
    return made_once(libs, lambda: _fetch(libs))


def _fetch(libs: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("the tests start Apache Kafka from Maven Central's jars and need "
                           "Maven ('mvn') on PATH: apt-get install maven")
    staging = libs.with_name(f"libs.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    result = subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM), f"-Dmaven.repo.local={cache_dir() / 'maven'}",
         "dependency:copy-dependencies", f"-DoutputDirectory={staging}",
         "-DincludeScope=runtime"], capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"fetching Kafka {kafka_version()} with Maven failed:\n"
                           f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
    (staging / ".complete").write_text(kafka_version())
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)


def _cluster_id() -> str:
    """A random KRaft cluster id that does not start with "-": the storage tool would read
    such an id as an option (Kafka's own Uuid.randomUuid skips them for the same reason)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if java is None:
        raise RuntimeError("Apache Kafka needs a Java runtime ('java' on PATH)")
    return java


# Settings that make a single node quick to start and its cleaner and retention quick to act.
FAST = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    "log.retention.check.interval.ms": "500",
    "log.segment.delete.delay.ms": "0",
    "file.delete.delay.ms": "0",
    "log.initial.task.delay.ms": "0",
    "log.message.timestamp.before.max.ms": str(2**63 - 1),
    "log.message.timestamp.after.max.ms": str(2**63 - 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
}


class KafkaBroker:
    """One Apache Kafka KRaft node in ``workdir``; a context manager, like EmbeddedBroker."""

    def __init__(self, workdir: Path, **settings: str) -> None:
        self.workdir = Path(workdir)
        self.port = _free_port()
        self.controller_port = _free_port()
        self.settings = {k.replace("_", "."): v for k, v in settings.items()}
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    def _properties(self) -> Path:
        values = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},"
                          f"CONTROLLER://127.0.0.1:{self.controller_port}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            **FAST, **self.settings,
        }
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        return path

    def _command(self, main: str, *args: str) -> list[str]:
        return [_java(), "-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j2.configurationFile={LOG4J}",
                f"-Dkafka.logs.dir={self.workdir / 'logs'}",
                "-cp", f"{kafka_libs()}/*", main, *args]

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs (benchmarks read its CPU time)."""
        return self._proc.pid if self._proc is not None else None

    def start(self, timeout_s: float = 120.0) -> KafkaBroker:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._properties()
        if not (self.log_dir / "meta.properties").exists():
            cluster_id = _cluster_id()
            subprocess.run(self._command("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                         "-c", str(config)),
                           check=True, capture_output=True, timeout=120)
        out = open(self.workdir / "broker.out", "ab")  # noqa: SIM115 (the process keeps it)
        self._proc = subprocess.Popen(self._command("kafka.Kafka", str(config)), stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers,
                             "log_level": 0})
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self._proc.returncode}; see "
                                   f"{self.workdir / 'broker.out'}")
            try:
                if admin.list_topics(timeout=2).brokers:
                    return
            except Exception:  # not listening yet
                time.sleep(0.2)
        raise RuntimeError(f"Kafka did not answer within {timeout_s}s; see "
                           f"{self.workdir / 'broker.out'}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(30)
        self._proc = None

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)
        self._proc = None

    def pause(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGCONT)

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
