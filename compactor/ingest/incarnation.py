"""Topic incarnations: a lake log holds the records of one incarnation of its topic, never two.

A topic deleted and recreated under the same name starts again at offset 0 with other
records; offsets alone cannot always tell (the new incarnation may already be longer than
the old one was). Kafka names each incarnation with a topic id (KIP-516); the log records the
id it mirrors in its table property ``compactor.kafka.topicId``.

Protocol:

1. At the start of ``compactor run`` the broker's topic id of every topic is fetched. A log
   without the property records it (one metadata commit, before any data commit of the run).
2. A log whose recorded id differs from the broker's stops the run with DataLossError (exit
   5), whatever ``fail.on.data.loss`` says: mixing incarnations is never a loss to skip.
3. Every micro-batch asks for the ids again after its tasks have read, and checks the answer
   before its commit lands (the commit is staged meanwhile), so records read from a new
   incarnation are never committed: if any task read from it, the broker already reported
   the new id.

A broker that reports no topic ids (Kafka before 2.8) skips the check with a warning; the
offset check of the source (an end offset behind the mirrored position) still applies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from compactor.config import CompactorConfig
from compactor.exceptions import BrokerUnavailableError, DataLossError, LakeError
from compactor.kafka.clients import request_timeout_s
from compactor.kafka.topic_ids import TopicIds
from compactor.lake import operations
from compactor.lake.layout import open_table, topic_paths
from compactor.lake.storage import failure

log = logging.getLogger(__name__)

TOPIC_ID_PROPERTY = "compactor.kafka.topicId"
_NO_ID = {"", "AAAAAAAAAAAAAAAAAAAAAA"}  # the zero UUID: a broker without topic ids


class Incarnations:
    """The topic ids this run mirrors, checked against the broker."""

    def __init__(self, config: CompactorConfig) -> None:
        self._config = config
        client_config = config.kafka_client_config()
        self._ids = TopicIds(client_config, request_timeout_s(client_config, 30.0))
        self.expected: dict[str, str] = {}

    def close(self) -> None:
        """End the process that asks for the ids."""
        self._ids.close()

    def broker_ids(self, topics: Iterable[str]) -> dict[str, str | None]:
        """The broker's topic id of each topic (None: the broker reports none)."""
        return self._ask(topics)()

    def _ask(self, topics: Iterable[str]) -> Callable[[], dict[str, str | None]]:
        """Send the request for the topics' ids now; the returned function waits for them."""
        wanted = sorted(set(topics))
        answer = self._ids.ask(wanted)

        def ids() -> dict[str, str | None]:
            found, errors = answer()
            for topic in wanted:
                if topic in errors:
                    raise BrokerUnavailableError(
                        f"cannot describe topic {topic!r} on {self._config.bootstrap_servers}: "
                        f"{errors[topic]}")
            return {t: None if found[t] in _NO_ID else found[t] for t in wanted}

        return ids

    def claim(self) -> None:
        """Record or compare each log's topic id (steps 1-2; the log must exist)."""
        ids = self.broker_ids(self._config.topics)
        for topic, broker_id in ids.items():
            if broker_id is None:
                log.warning("the broker reports no topic id for %s: a recreated topic is "
                            "detected only when its offsets fall behind the mirror", topic)
                continue
            path = topic_paths(self._config.lake_path, topic).log
            table = open_table(path, self._config.storage)
            if table is None:
                raise LakeError(f"lake log {path} does not exist yet; create it before claiming")
            recorded = table.metadata().configuration.get(TOPIC_ID_PROPERTY)
            if recorded is None:
                try:
                    table.alter.set_table_properties(
                        {TOPIC_ID_PROPERTY: broker_id}, raise_if_not_exists=False,
                        commit_properties=operations.properties(
                            operations.SET_PROPERTIES, f"the topic's id on the broker is "
                            f"{broker_id}"))
                except Exception as exc:
                    raise LakeError(f"cannot record the topic id in {path}: "
                                    f"{failure(path, exc)}") from exc
                log.info("%s: mirroring topic id %s", topic, broker_id)
            elif recorded != broker_id:
                raise _recreated(self._config, topic, recorded, broker_id)
            self.expected[topic] = broker_id

    def verify(self, topics: Iterable[str]) -> Callable[[], None]:
        """Ask the broker now whether the topics of a micro-batch still have the ids this run
        claimed (step 3); the returned function waits for the answer and raises unless they
        do. The caller asks once its tasks have read and calls it before its commit lands,
        staging the commit while the broker answers."""
        checked = [t for t in topics if t in self.expected]
        if not checked:
            return lambda: None
        answer = self._ask(checked)

        def check() -> None:
            for topic, broker_id in answer().items():
                if broker_id != self.expected[topic]:
                    raise _recreated(self._config, topic, self.expected[topic], broker_id)

        return check


def _recreated(config: CompactorConfig, topic: str, recorded: str,
               now: str | None) -> DataLossError:
    root = topic_paths(config.lake_path, topic).root
    return DataLossError(
        f"topic {topic!r} on {config.bootstrap_servers} has topic id {now}, but the lake log "
        f"mirrors topic id {recorded}: the topic was deleted and recreated. A log holds one "
        "incarnation, so nothing of the new one was written (fail.on.data.loss does not "
        f"change this). To mirror the new topic, move {root} aside or use another lake.path "
        "and checkpoint.path; the old records stay readable where they are."
    )
