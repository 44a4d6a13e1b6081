"""Data files a table's Delta log lists but its directory does not hold.

Such a table cannot be read by any Delta reader, and the mirror would go on committing to it
without noticing (only the files a pass reads are opened). A run checks its tables once, at
start: one recursive listing per table.
"""

from __future__ import annotations

from urllib.parse import unquote

import pyarrow.fs as pafs

from compactor.exceptions import LakeError
from compactor.lake.layout import open_table
from compactor.lake.storage import Storage

_SHOWN = 3


def missing_files(uri: str, storage: Storage) -> list[str]:
    """Paths (relative to the table) of live data files that are not there; [] for no table."""
    table = open_table(uri, storage)
    if table is None:
        return []
    fs, root = storage.filesystem(uri)
    root = root.rstrip("/")
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as exc:
        raise LakeError(f"cannot list the files of {uri}: {exc}") from exc
    present = {info.path for info in infos if info.type == pafs.FileType.File}
    live = (storage.filesystem(unquote(f))[1] for f in table.file_uris())
    return sorted(p[len(root) + 1:] if p.startswith(root) else p
                  for p in live if p not in present)


def check_tables(uris: list[str], storage: Storage) -> None:
    """Raise LakeError naming the first table whose log lists files that are missing."""
    for uri in uris:
        gone = missing_files(uri, storage)
        if gone:
            shown = ", ".join(gone[:_SHOWN]) + (", ..." if len(gone) > _SHOWN else "")
            raise LakeError(
                f"{uri}: {len(gone)} data file(s) its Delta log lists are missing ({shown}); "
                "no Delta reader can read the table. Restore them from a copy of the lake; "
                "the mirror does not write to a table with missing files")
