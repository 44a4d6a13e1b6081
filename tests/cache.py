"""What the fixtures make once per machine (Kafka's jars, delta-spark's environment, the JVMs'
class archive), made by one pytest worker while the others wait for it."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def cache_dir() -> Path:
    """``$KAFKA_LAKE_COMPACTOR_CACHE``, default ``~/.cache/kafka-lake-compactor``."""
    return Path(os.environ.get("KAFKA_LAKE_COMPACTOR_CACHE",
                               Path.home() / ".cache" / "kafka-lake-compactor"))


@contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold the lock file ``lock`` (made when missing) for the block: one process at a time."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # released when the file closes, or its process dies
        yield


def made_once(directory: Path, make: Callable[[], None]) -> Path:
    """``directory``, made by ``make`` unless its ``.complete`` mark is there (``make`` writes
    the mark last); one of pytest's workers makes it while the others wait."""
    if not (directory / ".complete").exists():
        with exclusive(directory.with_name(f"{directory.name}.lock")):
            if not (directory / ".complete").exists():
                make()
    return directory
