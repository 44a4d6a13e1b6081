"""Secrets kept out of the properties file, in Kafka's config-provider shape.

A value may be, or contain, ``${env:NAME}`` (an environment variable), ``${file:PATH}`` (a
file's whole content, trailing newline removed) or ``${file:PATH:KEY}`` (one key of a
``.properties`` file, as Kafka's FileConfigProvider reads it). They are resolved once, when
the file is loaded; the configuration remembers each reference so that ``describe-config``
shows ``${env:NAME}`` rather than the secret, and nothing logs the value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from compactor.exceptions import ConfigError

_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")


def _lookup(key: str, raw: str, kind: str, body: str, environ: Mapping[str, str]) -> str:
    if kind == "env":
        if body not in environ:
            raise ConfigError(key, raw, f"names the environment variable {body}, which is not "
                              "set", f"export {body}=... before starting, or write the value")
        return environ[body]
    path, _, wanted = body.partition(":")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(key, raw, f"names the file {path}, which cannot be read: "
                          f"{exc.strerror or exc}", "check the path and its permissions") from None
    if not wanted:
        return text.rstrip("\n")
    from compactor.config.properties import parse_properties

    values = parse_properties(text, source=path)
    if wanted not in values:
        raise ConfigError(key, raw, f"names the key {wanted} of {path}, which has no such key",
                          f"keys there: {', '.join(sorted(values)) or 'none'}")
    return values[wanted]


def resolve_references(raw: Mapping[str, str], environ: Mapping[str, str] | None = None,
                       ) -> tuple[dict[str, str], dict[str, str]]:
    """The values with every reference replaced, and {key: the value as written} for the
    keys that held one."""
    env = os.environ if environ is None else environ
    values: dict[str, str] = {}
    written: dict[str, str] = {}
    for key, value in raw.items():
        if _REFERENCE.search(value):
            written[key] = value

            def resolve(m: re.Match[str], key: str = key, value: str = value) -> str:
                return _lookup(key, value, m.group(1), m.group(2), env)

            value = _REFERENCE.sub(resolve, value)
        values[key] = value
    return values, written
