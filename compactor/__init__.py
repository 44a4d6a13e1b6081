"""kafka-lake-compactor: Kafka topics mirrored into Delta Lake, compacted as Kafka would."""

from compactor.config import CompactorConfig, TopicConfig, build_config, load_config
from compactor.exceptions import CompactorError
from compactor.lake.snapshot import LatestSnapshot, LogSnapshot, open_latest, open_log

__all__ = [
    "CompactorConfig", "CompactorError", "LatestSnapshot", "LogSnapshot", "TopicConfig",
    "build_config", "load_config", "open_latest", "open_log",
]
__version__ = "0.1.0"
