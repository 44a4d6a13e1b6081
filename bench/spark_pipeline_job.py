"""The pipeline users build instead of the mirror, run under delta-spark by
``bench/spark_pipeline.py`` in the tests' delta-spark environment: Spark's own Kafka source
(``spark-sql-kafka-0-10``) into a Delta append table, and the common ``foreachBatch`` MERGE of
each micro-batch's last record per key into a latest-value Delta table (a tombstone deletes).
Both queries read the topic from the start until caught up (``availableNow``). Prints one JSON
line: the seconds from the session's start to both queries' end, and the micro-batches.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import Window
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "lakehouse"))
from spark_job import session  # noqa: E402  (the tests' delta-spark session)


def main() -> None:
    job = json.loads(sys.argv[1])
    started = time.monotonic()
    spark = session(packages=[
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:{job['spark_version']}"])
    source = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", job["bootstrap"])
              .option("subscribe", job["topic"]).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", job["per_trigger"])
              .load().select("key", "value", "partition", "offset"))
    latest = job["latest"]
    spark.createDataFrame([], "key BINARY, value BINARY, partition INT, offset BIGINT") \
        .write.format("delta").save(latest)
    merges = 0

    def merge(batch: Any, _batch_id: int) -> None:
        nonlocal merges
        last = (batch.withColumn("n", F.row_number().over(
            Window.partitionBy("key").orderBy(F.col("offset").desc())))
                .where("n = 1").drop("n"))
        (DeltaTable.forPath(spark, latest).alias("t")
         .merge(last.alias("s"), "t.key = s.key")
         .whenMatchedDelete(condition="s.value IS NULL")
         .whenMatchedUpdateAll(condition="s.value IS NOT NULL")
         .whenNotMatchedInsertAll(condition="s.value IS NOT NULL").execute())
        merges += 1

    raw = (source.writeStream.format("delta").outputMode("append")
           .option("checkpointLocation", job["checkpoints"] + "/raw")
           .trigger(availableNow=True).start(job["raw"]))
    table = (source.writeStream.foreachBatch(merge)
             .option("checkpointLocation", job["checkpoints"] + "/latest")
             .trigger(availableNow=True).start())
    raw.awaitTermination()
    table.awaitTermination()
    print(json.dumps({"seconds": time.monotonic() - started, "merges": merges,
                      "raw_batches": len(raw.recentProgress)}))


if __name__ == "__main__":
    main()
