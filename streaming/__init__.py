"""The Spark side: the session, the ``pykafka`` data source and the mirror query."""

from streaming.kafka_source import SHORT_NAME, KafkaDataSource

__all__ = ["SHORT_NAME", "KafkaDataSource"]
