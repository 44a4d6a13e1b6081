"""Secrets from the environment or a file, never from the properties file itself."""

from __future__ import annotations

import pytest

from compactor.config import load_config
from compactor.config.providers import resolve_references
from compactor.exceptions import ConfigError

BASE = "bootstrap.servers=b:9092\ntopics=t\nlake.path=/tmp/lake\n"


def test_env_and_file_references_resolve_and_are_remembered_as_written(tmp_path) -> None:
    secret = tmp_path / "password.txt"
    secret.write_text("s3cret-from-file\n")
    jaas = tmp_path / "client.properties"
    jaas.write_text("sasl.password=from-a-key\n")
    values, written = resolve_references({
        "kafka.sasl.username": "${env:KAFKA_USER}",
        "kafka.sasl.password": f"${{file:{secret}}}",
        "kafka.ssl.key.password": f"${{file:{jaas}:sasl.password}}",
        "kafka.client.id": "mirror-${env:KAFKA_USER}-1",
        "topics": "t"}, environ={"KAFKA_USER": "alice"})
    assert values["kafka.sasl.username"] == "alice"
    assert values["kafka.sasl.password"] == "s3cret-from-file"
    assert values["kafka.ssl.key.password"] == "from-a-key"
    assert values["kafka.client.id"] == "mirror-alice-1"
    assert written == {"kafka.sasl.username": "${env:KAFKA_USER}",
                       "kafka.sasl.password": f"${{file:{secret}}}",
                       "kafka.ssl.key.password": f"${{file:{jaas}:sasl.password}}",
                       "kafka.client.id": "mirror-${env:KAFKA_USER}-1"}


@pytest.mark.parametrize(("value", "rule"), [
    ("${env:NOT_SET_ANYWHERE}",
     "names the environment variable NOT_SET_ANYWHERE, which is not set"),
    ("${file:/no/such/file}", "names the file /no/such/file, which cannot be read"),
])
def test_a_reference_that_cannot_resolve_names_the_key_and_the_rule(value, rule) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_references({"kafka.sasl.password": value}, environ={})
    assert f"kafka.sasl.password='{value}'" in str(info.value) and rule in str(info.value)
    assert info.value.exit_code == 2


def test_load_config_resolves_at_the_boundary(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MIRROR_PASSWORD", "hunter2")
    conf = tmp_path / "c.properties"
    conf.write_text(BASE + "kafka.sasl.password=${env:MIRROR_PASSWORD}\n"
                    "max.offsets.per.trigger=0\n")
    config = load_config(conf)
    assert config.kafka["sasl.password"] == "hunter2"
    assert config.written == {"kafka.sasl.password": "${env:MIRROR_PASSWORD}"}
    assert config.max_offsets_per_trigger == 0  # documented as "no limit": accepted
