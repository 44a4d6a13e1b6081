"""Java client keys become librdkafka's, or are refused naming the key to use instead."""

from __future__ import annotations

import pytest

from compactor.config import build_config
from compactor.exceptions import ConfigError
from compactor.kafka.client_config import check_with_librdkafka, translate_java_keys

BASE = {"bootstrap.servers": "b:9092", "topics": "t", "lake.path": "/tmp/lake"}


@pytest.mark.parametrize(("module", "mechanism"), [
    ("org.apache.kafka.common.security.plain.PlainLoginModule", "PLAIN"),
    ("org.apache.kafka.common.security.scram.ScramLoginModule", "SCRAM-SHA-512"),
])
def test_a_jaas_line_becomes_username_and_password(module, mechanism) -> None:
    conf = translate_java_keys({
        "security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="mirror" password="p\\"w;d";'})
    assert conf["sasl.username"] == "mirror" and conf["sasl.password"] == 'p\\"w;d'
    assert "sasl.jaas.config" not in conf
    check_with_librdkafka(conf)  # librdkafka accepts the result


def test_a_jaas_module_librdkafka_cannot_run_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError) as info:
        translate_java_keys({"sasl.jaas.config":
                             'com.sun.security.auth.module.Krb5LoginModule required '
                             'keyTab="/k" principal="p" password="hunter2";'})
    assert "Krb5LoginModule" in str(info.value) and "hunter2" not in str(info.value)
    assert "kafka.sasl.kerberos" in str(info.value)


@pytest.mark.parametrize(("key", "use"), [
    ("ssl.truststore.location", "kafka.ssl.ca.location"),
    ("fetch.max.wait.ms", "kafka.fetch.wait.max.ms"),
])
def test_java_only_keys_name_the_librdkafka_key(key, use) -> None:
    with pytest.raises(ConfigError) as info:
        translate_java_keys({key: "x"})
    assert f"kafka.{key}='x'" in str(info.value) and use in str(info.value)
    assert info.value.exit_code == 2


def test_keystores_and_hostname_verification() -> None:
    with pytest.raises(ConfigError, match="is not PKCS12"):
        translate_java_keys({"ssl.keystore.type": "JKS"})
    conf = translate_java_keys({"ssl.keystore.type": "PKCS12",
                                "ssl.endpoint.identification.algorithm": ""})
    assert conf == {"ssl.endpoint.identification.algorithm": "none"}


def test_librdkafka_names_an_unknown_key_or_a_bad_value_and_hides_secrets() -> None:
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, "kafka.fetch.wait.max.ms": "soon"})
    assert "kafka.fetch.wait.max.ms='soon'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, "kafka.no.such.setting": "1"})
    assert "kafka.no.such.setting='1'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, "kafka.security.protocol": "SASL_SSL",
                      "kafka.sasl.mechanism": "SCRAM-SHA-512"})
    assert "sasl.username and sasl.password must be set" in str(info.value)
    with pytest.raises(ConfigError) as info:  # no mechanism: librdkafka's GSSAPI, not built in
        build_config({**BASE, "kafka.security.protocol": "SASL_SSL"})
    assert "kafka.sasl.mechanism=\"GSSAPI (librdkafka's default)\"" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_config({**BASE, "kafka.security.protocol": "SSL",
                      "kafka.ssl.keystore.location": "/nope.p12",
                      "kafka.ssl.keystore.password": "hunter2"})
    assert "/nope.p12" in str(info.value) and "hunter2" not in str(info.value)
