"""delta-spark jobs over the mirror's tables, run by ``tests/lakehouse/delta_spark.py`` in an
environment of its own. With a JSON job in argv: runs it and prints one JSON line of results.
With ``--serve``: one Spark session for job after job, each a JSON line on stdin answered by a
line ``RESULT <json>`` (or ``FAILED <json traceback>``) on stdout; other lines there are the
JVM's. A ``catalog`` job needs a session of its own and is not served.

Jobs:
- ``{"batch": {name: path}}``: per table its rows' (partition, offset), its ``DESCRIBE
  HISTORY`` (version, operation, userMetadata), the rows at its oldest version still in the
  log, and the row count a plain ``spark.read.parquet`` of the folder gives.
- ``{"stream": path, "seconds": S, "until": N, "ready": file}``: follow the table with
  Structured Streaming as the docs recommend (``skipChangeCommits``), touching ``file`` once
  its first micro-batch is done, until N rows arrived or S seconds passed; the (partition,
  offset) of every row seen, and the query's exception if it failed. With ``"change_feed":
  true`` it follows the table's change data feed instead: [version, change type, key, value]
  per row; with ``"stop": file`` it ends once ``file`` exists and all was processed.
- ``{"create": {path: {"properties": {...}, "partition_by": [...]}}}``: create a downstream
  table of four users (``user_id``, ``plan``, ``region``, ``email``) with delta-spark; per
  table its protocol (``DESCRIBE DETAIL``'s reader and writer versions and features).
- ``{"keys": {path: column}}``: per table the sorted values of ``column`` delta-spark reads.
- ``{"records": [path, ...]}``: per log table every column of every row delta-spark reads,
  binary as hex and the timestamp in microseconds, sorted by partition and offset.
- ``{"catalog": {"conf": {...}, "database": db}}``: with the extra session settings (a Hive
  metastore), the tables of ``db`` and per table its row count and location.
- ``{"changes": path}``: the table's change data feed from version 0 (``readChangeFeed``):
  [version, change type, key, value] per row, or the error when Spark cannot read it.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from typing import Any

from delta import configure_spark_with_delta_pip
from pyspark.sql import SparkSession


def session(extra: dict[str, str] | None = None,
            packages: list[str] | None = None) -> SparkSession:
    builder = (SparkSession.builder.master("local[2]").appName("delta-spark-reader")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               # The tests' tables have a short log: its replay in 50 tasks (the default) is
               # mostly task overhead.
               .config("spark.databricks.delta.snapshotPartitions", "2")
               .config("spark.jars.ivy", os.environ["DELTA_SPARK_IVY"])
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog",
                       "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    if extra and "spark.sql.catalogImplementation" in extra:
        builder = builder.enableHiveSupport()
    # Ivy writes its cache as it resolves the packages: one job of pytest's workers at a time.
    with open(os.environ["DELTA_SPARK_IVY"] + ".lock", "a") as resolving:
        fcntl.flock(resolving, fcntl.LOCK_EX)
        spark = configure_spark_with_delta_pip(builder, extra_packages=packages).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def positions(df: Any) -> list[list[int]]:
    return sorted([r["partition"], r["offset"]] for r in df.select("partition", "offset")
                  .collect())


def batch(spark: SparkSession, tables: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, path in tables.items():
        df = spark.read.format("delta").load(path)
        history = [[r["version"], r["operation"], r["userMetadata"]] for r in
                   spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()]
        oldest = min(v for v, _, _ in history)
        then = spark.read.format("delta").option("versionAsOf", oldest).load(path)
        has_offsets = "offset" in df.columns
        out[name] = {
            "rows": positions(df) if has_offsets else df.count(),
            "history": history,
            "oldest": [oldest, positions(then) if has_offsets else then.count()],
            "parquet_rows": spark.read.parquet(path).count(),
        }
    return out


def stream(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    path, seconds, until, ready = job["stream"], job["seconds"], job["until"], job["ready"]
    if job.get("change_feed"):
        columns = ["_commit_version", "_change_type", "CAST(key AS STRING) AS k",
                   "CAST(value AS STRING) AS v"]
        reader = spark.readStream.format("delta").option("readChangeFeed", "true")
    else:
        columns = ["partition", "offset"]
        reader = spark.readStream.format("delta").option("skipChangeCommits", "true")
    name = f"seen_{time.monotonic_ns()}"  # a served session's earlier streams keep theirs
    query = (reader.load(path).selectExpr(*columns).writeStream.format("memory")
             .queryName(name).trigger(processingTime="1 second").start())
    deadline = time.monotonic() + seconds
    error = None
    while time.monotonic() < deadline:
        if query.recentProgress and not os.path.exists(ready):
            open(ready, "w").close()
        if query.exception() is not None:
            error = str(query.exception())
            break
        if job.get("stop") and os.path.exists(job["stop"]):
            query.processAllAvailable()  # everything committed before the stop was asked
            break
        if spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"] >= until:
            break
        time.sleep(1)
    query.stop()
    rows = spark.sql(f"SELECT * FROM {name}")
    seen = (sorted([list(r) for r in rows.collect()], key=lambda r: (r[0], str(r[1:])))
            if job.get("change_feed") else positions(rows))
    return {"seen": seen, "error": error, "batches": len(query.recentProgress)}


# Keys long enough not to occur by chance in a checkpoint's compressed bytes, which the audit
# searches for key bytes too.
USERS = [("user-1", "free", "eu", "SECRET-user-1"), ("user-2", "pro", "us", "SECRET-user-2"),
         ("user-3", "pro", "eu", "SECRET-user-3"), ("user-4", "team", "us", "SECRET-user-4")]


def create(spark: SparkSession, tables: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, spec in tables.items():
        writer = (spark.createDataFrame(USERS, "user_id STRING, plan STRING, region STRING, "
                                               "email STRING").coalesce(1)
                  .write.format("delta"))
        for key, value in spec.get("properties", {}).items():
            writer = writer.option(key, value)
        if spec.get("partition_by"):
            writer = writer.partitionBy(*spec["partition_by"])
        writer.save(path)
        props = ", ".join(f"'{k}' = '{v}'" for k, v in spec.get("properties", {}).items())
        if props:  # table properties, not only the write's options
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({props})")
        detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").collect()[0].asDict()
        out[path] = {k: detail.get(k) for k in ("minReaderVersion", "minWriterVersion",
                                                  "tableFeatures", "partitionColumns")}
    return out


def keys(spark: SparkSession, tables: dict[str, str]) -> dict[str, Any]:
    return {path: sorted(r[0] for r in spark.read.format("delta").load(path)
                         .select(column).collect())
            for path, column in tables.items()}


def records(spark: SparkSession, paths: list[str]) -> dict[str, Any]:
    columns = ["partition", "offset", "hex(key)", "hex(value)", "topic", "timestampType",
               "unix_micros(timestamp)", "deleteHorizonMs", "segment",
               "to_json(transform(headers, h -> named_struct('k', h.key, 'v', hex(h.value))))"]
    return {path: [list(r) for r in spark.read.format("delta").load(path)
                   .selectExpr(*columns).orderBy("partition", "offset").collect()]
            for path in paths}


def changes(spark: SparkSession, path: str) -> dict[str, Any]:
    try:
        rows = (spark.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", 0).load(path)
                .selectExpr("_commit_version", "_change_type", "CAST(key AS STRING) AS k",
                            "CAST(value AS STRING) AS v").collect())
    except Exception as exc:  # the feed reaches back the vacuum grace only
        return {"rows": None, "error": str(exc)[:2000]}
    return {"rows": sorted([r[0], r[1], r[2], r[3]] for r in rows), "error": None}


def catalog(spark: SparkSession, database: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in spark.sql(f"SHOW TABLES IN `{database}`").collect():
        name = f"{database}.{row['tableName']}"
        detail = spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()
        out[name] = {"rows": spark.table(name).count(), "location": detail["location"],
                     "format": detail["format"]}
    return out


def run(spark: SparkSession, job: dict[str, Any]) -> dict[str, Any]:
    if "batch" in job:
        return batch(spark, job["batch"])
    if "create" in job:
        return create(spark, job["create"])
    if "keys" in job:
        return keys(spark, job["keys"])
    if "records" in job:
        return records(spark, job["records"])
    if "catalog" in job:
        return catalog(spark, job["catalog"]["database"])
    if "changes" in job:
        return changes(spark, job["changes"])
    return stream(spark, job)


def serve() -> None:
    """Jobs from stdin until it closes, in one session: a JVM's start and its first query
    (Delta's classes loading) are paid once, not per job."""
    import traceback

    spark = session()
    for line in sys.stdin:
        try:
            answer = "RESULT " + json.dumps(run(spark, json.loads(line)))
        except Exception:
            answer = "FAILED " + json.dumps(traceback.format_exc())
        print(answer, flush=True)
    spark.stop()


def main() -> None:
    if sys.argv[1] == "--serve":
        serve()
        return
    job = json.loads(sys.argv[1])
    spark = session(job["catalog"]["conf"] if "catalog" in job else None)
    print(json.dumps(run(spark, job)))


if __name__ == "__main__":
    main()
