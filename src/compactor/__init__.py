"""kafka-lake-compactor: Kafka topics mirrored into Delta Lake, compacted as Kafka would."""

from compactor.config import CompactorConfig, TopicConfig, build_config, load_config
from compactor.exceptions import CompactorError

__all__ = ["CompactorConfig", "CompactorError", "TopicConfig", "build_config", "load_config"]
__version__ = "0.1.0"
