"""Record formats: how a topic's keys and values are decoded into typed columns.

``bytes`` (the default) keeps Kafka's bytes; ``string`` decodes UTF-8; ``json`` parses JSON
against a declared Spark DDL schema; ``avro``, ``json-schema`` and ``protobuf`` read the
Confluent Schema Registry wire format with confluent-kafka's registry client and
deserializers. The log keeps the bytes whatever the format; decoded columns go to the
latest-value table, and records that cannot be decoded to ``L/T/rejected``.
"""

from compactor.formats.decoder import Decoded, Decoder
from compactor.formats.spec import FORMATS, REGISTRY_FORMATS, RecordFormat, TopicFormat

__all__ = ["FORMATS", "REGISTRY_FORMATS", "Decoded", "Decoder", "RecordFormat", "TopicFormat"]
