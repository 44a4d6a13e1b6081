"""Registration of each topic's tables in the Spark session's catalog.

With ``catalog.register=true`` the mirror registers ``L/T/log`` and ``L/T/table`` at start as
external Delta tables ``<catalog.table.prefix><topic>_log`` and ``..._table`` in
``catalog.database`` of whatever catalog the session is configured with (``spark.sql.*`` and
``spark.hadoop.*`` keys: a Hive metastore, Glue through its metastore client, ...), so that
every Spark session sharing that catalog reads them by name.

The mirror writes with delta-rs and runs without Delta's jars, so Spark's ``CREATE TABLE ...
USING delta`` (which loads the Delta data source) is not available to it. The entry is made
the way delta-spark makes it: provider ``delta``, the table's location, no columns (a Delta
reader takes the schema from the table's log), through the session catalog directly. A name
already registered at the same location is left as it is (idempotent); at another location
it is left too, with a warning naming both.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from pyspark.sql import SparkSession

from compactor.config import CompactorConfig
from compactor.lake.layout import open_table, topic_paths
from streaming.exceptions import StreamingError

log = logging.getLogger(__name__)

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def table_name(prefix: str, topic: str, kind: str) -> str:
    """The catalog name of a topic's table: Kafka's '.' and '-' become '_'."""
    return _UNSAFE.sub("_", f"{prefix}{topic}_{kind}").lower()


def _location(path: str) -> str:
    return path if "://" in path else f"file://{path}"


def register_tables(spark: SparkSession, config: CompactorConfig) -> list[str]:
    """Register every topic's existing log and latest-value table; the names registered now."""
    if not config.catalog_register:
        return []
    jvm: Any = spark._jvm
    session: Any = spark._jsparkSession
    catalog = session.sessionState().catalog()
    database = config.catalog_database
    try:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    except Exception as exc:
        raise StreamingError(f"catalog.database={database!r}: cannot create it in the "
                             f"session's catalog: {str(exc).splitlines()[0]}") from exc
    made = []
    for topic in config.topics:
        paths = topic_paths(config.lake_path, topic)
        for kind, path in (("log", paths.log), ("table", paths.table)):
            if open_table(path, config.storage) is None:
                continue  # registered at a later start, once it exists
            name = table_name(config.catalog_table_prefix, topic, kind)
            location = _location(path)
            ident = session.sessionState().sqlParser().parseTableIdentifier(
                f"`{database}`.`{name}`")
            try:
                if catalog.tableExists(ident):
                    where = str(catalog.getTableMetadata(ident).location())
                    if where.rstrip("/") != location.rstrip("/"):
                        log.warning("catalog table %s.%s points at %s, not at %s: left as it is",
                                    database, name, where, location)
                    continue
                catalog.createTable(_catalog_table(jvm, ident, location), True, False)
            except Exception as exc:
                raise StreamingError(f"registering {path} as {database}.{name} in the "
                                     f"session's catalog failed: {str(exc).splitlines()[0]}") \
                    from exc
            made.append(f"{database}.{name}")
    if made:
        log.info("registered in the catalog: %s", ", ".join(made))
    return made


def _arity(jvm: Any, class_name: str, method: str) -> int:
    """How many parameters ``method`` takes in this Spark (its case classes grow fields)."""
    cls = jvm.java.lang.Class.forName(class_name)
    return int(max(m.getParameterCount() for m in cls.getMethods() if m.getName() == method))


def _catalog_table(jvm: Any, ident: Any, location: str) -> Any:
    """An external table entry as delta-spark writes one: provider delta, no columns; every
    other field Spark's default."""
    pkg = jvm.org.apache.spark.sql.catalyst.catalog
    some = jvm.scala.Option.apply
    empty = pkg.CatalogStorageFormat.empty()
    n = _arity(jvm, "org.apache.spark.sql.catalyst.catalog.CatalogStorageFormat", "copy")
    storage = empty.copy(some(jvm.java.net.URI(location)),
                         *[getattr(empty, f"copy$default${i}")() for i in range(2, n + 1)])
    n = _arity(jvm, "org.apache.spark.sql.catalyst.catalog.CatalogTable", "apply")
    table = pkg.CatalogTable
    return table.apply(ident, pkg.CatalogTableType.EXTERNAL(), storage,
                       jvm.org.apache.spark.sql.types.StructType(), some("delta"),
                       *[getattr(table, f"apply$default${i}")() for i in range(6, n + 1)])
