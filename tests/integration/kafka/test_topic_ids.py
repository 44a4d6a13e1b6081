"""Topic ids asked of Apache Kafka by the child process, as the mirror asks them every batch."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from compactor.kafka.topic_ids import TopicIds


def _topics(admin: AdminClient, n: int) -> list[str]:
    names = [f"ids-{uuid.uuid4().hex[:10]}" for _ in range(n)]
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in names]).values():
        future.result(30)
    return names


def _ids(admin: AdminClient, topics: list[str]) -> dict[str, str]:
    futures = admin.describe_topics(TopicCollection(topics))
    return {t: str(futures[t].result().topic_id) for t in topics}


def _child(ids: TopicIds) -> subprocess.Popen[bytes]:
    child = ids._child
    assert child is not None
    return child


def test_the_child_answers_the_ids_kafka_reports_and_the_errors(kafka) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    names = _topics(admin, 3)
    ids = TopicIds({"bootstrap.servers": kafka.bootstrap_servers}, 10.0)
    try:
        found, errors = ids.ask(names)()
        assert found == _ids(admin, names) and errors == {}
        missing = f"ids-missing-{uuid.uuid4().hex[:8]}"
        found, errors = ids.ask([names[0], missing])()
        assert found == {names[0]: _ids(admin, names[:1])[names[0]]}
        assert missing in errors and "UNKNOWN_TOPIC" in errors[missing].upper()
    finally:
        ids.close()


def test_an_answer_nobody_waited_for_is_skipped(kafka) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    first, second = _topics(admin, 2)
    ids = TopicIds({"bootstrap.servers": kafka.bootstrap_servers}, 10.0)
    try:
        ids.ask([first])  # a batch that failed before its commit never reads its answer
        found, _ = ids.ask([second])()
        assert found == _ids(admin, [second])
    finally:
        ids.close()


def test_a_killed_child_is_replaced_and_its_request_answered_in_process(kafka) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    names = _topics(admin, 2)
    expected = _ids(admin, names)
    ids = TopicIds({"bootstrap.servers": kafka.bootstrap_servers}, 10.0)
    try:
        assert ids.ask(names)()[0] == expected
        killed = _child(ids)
        answer = ids.ask(names)
        killed.kill()
        killed.wait(30)
        assert answer()[0] == expected  # the child's answer if it came first, else asked here
        assert ids.ask(names)()[0] == expected
        assert _child(ids).pid != killed.pid and _child(ids).poll() is None
    finally:
        ids.close()


def test_signals_to_the_run_leave_the_child_to_its_parent_and_close_ends_it(kafka) -> None:
    names = _topics(AdminClient({"bootstrap.servers": kafka.bootstrap_servers,
                                 "log_level": 0}), 1)
    ids = TopicIds({"bootstrap.servers": kafka.bootstrap_servers}, 10.0)
    ids.ask(names)()
    child = _child(ids)
    # A terminal's Ctrl-C and systemd's stop go to the run's process group: not the child's.
    assert os.getpgid(child.pid) != os.getpgid(0) and os.getsid(child.pid) == child.pid
    os.kill(child.pid, signal.SIGINT)
    assert ids.ask(names)()[1] == {} and _child(ids) is child
    ids.close()
    assert child.returncode == 0  # it ended when its stdin closed; killed would be -9


def test_a_folder_named_like_the_product_in_the_working_directory_is_not_imported(
        kafka, tmp_path, monkeypatch) -> None:
    names = _topics(AdminClient({"bootstrap.servers": kafka.bootstrap_servers,
                                 "log_level": 0}), 1)
    (tmp_path / "compactor").mkdir()
    (tmp_path / "compactor" / "__init__.py").write_text('raise ImportError("shadowed")\n')
    monkeypatch.chdir(tmp_path)
    ids = TopicIds({"bootstrap.servers": kafka.bootstrap_servers}, 10.0)
    try:
        assert ids.ask(names)()[1] == {}
        assert _child(ids).poll() is None  # answered by the child, not in process after it died
    finally:
        ids.close()


def test_the_child_is_heard_when_the_driver_holds_more_than_1024_descriptors(kafka) -> None:
    # A driver with hundreds of partitions holds many sockets and files: the child's pipe then
    # lands past FD_SETSIZE, where select() refuses it.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers, "log_level": 0})
    names = _topics(admin, 1)
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    ids = TopicIds({"bootstrap.servers": kafka.bootstrap_servers}, 10.0)
    try:
        assert ids.ask(names)()[0] == _ids(admin, names)
        child = _child(ids)
        assert child.stdout is not None and child.stdout.fileno() >= 1024
        assert child.poll() is None  # answered by the child, not in process after losing it
    finally:
        ids.close()
        for fd in held:
            os.close(fd)
