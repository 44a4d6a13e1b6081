"""Where the lake's files live: a local directory, a ``file://`` URI, or object storage.

Delta commits go through deltalake, and the data files the compactor writes and reads itself
go through a pyarrow filesystem built on delta-rs's own object store (its
``DeltaStorageHandler``), so one set of options (``lake.storage.*``, the names delta-rs reads:
``AWS_ENDPOINT_URL``, ``AZURE_STORAGE_ACCOUNT_NAME``, ``GOOGLE_SERVICE_ACCOUNT`` ...) reaches
both, and credentials delta-rs finds in the environment or an instance profile work for both.

On object storage a data file is written once under its final name (a PUT is atomic); on a
local disk it is written under a temporary name and renamed, so a crash never leaves a
half-written file under a name that looks finished.
"""

from __future__ import annotations

import functools
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from deltalake import DeltaTable
from deltalake.fs import DeltaStorageHandler

from compactor.exceptions import one_line

# Schemes delta-rs opens natively (object_store's S3, GCS and Azure backends).
REMOTE_SCHEMES = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "azure", "adl")


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def scheme(uri: str) -> str:
    return "" if "://" not in uri else uri.split("://", 1)[0].lower()


@functools.lru_cache(maxsize=16)
def _remote(base: str, options: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    return pafs.PyFileSystem(DeltaStorageHandler(base, dict(options)))


@dataclass(frozen=True)
class Storage:
    """How to reach the lake: delta-rs storage options, the same for every table."""

    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def table(self, uri: str, version: int | None = None) -> DeltaTable:
        """Open a Delta table (raises delta-rs's errors; see ``layout.open_table``)."""
        return DeltaTable(uri, version=version, storage_options=self.delta_options(uri))

    def delta_options(self, uri: str) -> dict[str, str] | None:
        """What to hand deltalake for ``uri``: nothing for local paths."""
        return None if is_local(uri) else dict(self.options)

    def filesystem(self, uri: str) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem for ``uri`` and the path to give it."""
        if is_local(uri):
            return _LOCAL_FS, local_path(uri)
        parts = urlsplit(uri)
        base = f"{parts.scheme}://{parts.netloc}"
        return _remote(base, tuple(sorted(self.options.items()))), parts.path.lstrip("/")


LOCAL = Storage()
_LOCAL_FS = pafs.LocalFileSystem()  # stateless: one for every local path


def failure(uri: str, exc: BaseException) -> str:
    """``exc``'s text on one line, and for a table on a local disk whose error names no
    operating-system cause, the reason its directory cannot be written, if it cannot."""
    text = one_line(str(exc)) or type(exc).__name__
    if not is_local(uri) or "os error" in text:
        return text
    directory = os.path.join(local_path(uri), "_delta_log")
    while not os.path.isdir(directory) and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
    probe = os.path.join(directory, f".compactor-probe-{uuid.uuid4().hex}")
    try:
        with open(probe, "wb"):
            pass
        os.remove(probe)
    except OSError as err:
        return f"{text} ({err.strerror} [errno {err.errno}]: cannot write in {directory})"
    return text
