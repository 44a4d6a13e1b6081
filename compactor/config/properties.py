"""A reader for Java ``.properties`` files, the format Kafka's own configs use.

Supported: ``key=value``, ``key: value`` and ``key value``; ``#`` and ``!`` comments; a trailing
backslash continues the line; ``\\t``, ``\\n``, ``\\\\``, ``\\=``, ``\\:`` and ``\\uXXXX`` escapes.
"""

from __future__ import annotations

from pathlib import Path

from compactor.exceptions import ConfigError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            out.append(chr(int(text[i + 2 : i + 6], 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending += line[:-1]
            continue
        lines.append(pending + line)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t")
    if rest[:1] in ("=", ":") and (i == len(line) or line[i] in " \t=:"):
        rest = rest[1:].lstrip(" \t")
    return _unescape(key), _unescape(rest)


def parse_properties(text: str, source: str = "<string>") -> dict[str, str]:
    """Parse properties text; a key given twice is an error, since one of the two is a mistake."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        if key in result:
            raise ConfigError(
                key, value, f"given twice in {source} (first as {result[key]!r})",
                "keep one of the two lines",
            )
        result[key] = value
    return result


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file; an unreadable file is a :class:`ConfigError`, not a traceback."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            "--config", str(p), f"cannot be read: {exc.strerror or exc}",
            "pass the path of a .properties file, for example conf/compactor.properties",
        ) from exc
    return parse_properties(text, source=str(p))
