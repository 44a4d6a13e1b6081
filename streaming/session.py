"""The Spark session the product runs on, with the Kafka data source registered."""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from streaming.exceptions import StreamingError
from streaming.kafka_source import KafkaDataSource

log = logging.getLogger(__name__)

# Small, predictable defaults for one machine; every key can be overridden with spark.*.
DEFAULTS = {
    "spark.master": "local[*]",
    "spark.app.name": "kafka-lake-compactor",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    "spark.python.worker.reuse": "true",
    # A query that runs for months makes one SQL execution, job and stage per micro-batch;
    # the UI keeps 1,000 of each by default, and its listener's work grows with them.
    "spark.sql.ui.retainedExecutions": "50",
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "10000",
}


def build_session(spark_conf: Mapping[str, str] | None = None) -> SparkSession:
    """Start (or join) the Spark session; Python workers run this very interpreter.

    Workers must import this package and the same pyarrow as the driver, so they run
    ``sys.executable`` unless ``spark.pyspark.python`` names another interpreter. PySpark's
    Python side launches workers from the PYSPARK_PYTHON environment variable alone (it
    ignores the conf), so this is the one place the product sets it; the user never has to.
    """
    if shutil.which("java") is None:
        raise StreamingError(
            "Java was not found on PATH: Spark needs a Java 17 runtime "
            "(for example 'apt-get install openjdk-17-jre-headless')"
        )
    conf = {
        **DEFAULTS,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        **(spark_conf or {}),
    }
    os.environ["PYSPARK_PYTHON"] = conf["spark.pyspark.python"]
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:
        raise StreamingError(f"Spark did not start: {exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaDataSource)
    return spark
