"""An embedded Schema Registry for the demo and the tests, speaking Confluent's REST API.

No Schema Registry server installs on machines that reach only PyPI, so ``compactor demo``
and the tests run this one on localhost. It implements the part of Confluent's documented API
that producers, consumers and their serializers use: subjects and their versions, schemas by
id, lookup of a schema under a subject, per-subject and global compatibility (``NONE``,
``BACKWARD``, ``FORWARD``, ``FULL`` and their ``_TRANSITIVE`` forms, checked for Avro; JSON
Schema and Protobuf schemas are accepted as given), and Confluent's error bodies
(``{"error_code": 40403, "message": ...}``). Schemas live in memory and die with it, like the
embedded broker's data. It is not a production registry: no auth, no contexts, no modes.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlparse

_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
               ("long", "double"), ("float", "double"), ("string", "bytes"), ("bytes", "string")}
LEVELS = ("NONE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE",
          "FULL_TRANSITIVE")


class _Incompatible(Exception):
    pass


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("type"))
    if isinstance(schema, list):
        return "union"
    return str(schema)


def _can_read(reader: Any, writer: Any, path: str = "") -> None:
    """Avro schema resolution, simplified: may data written with ``writer`` be read with
    ``reader``? Raises :class:`_Incompatible` naming the field that breaks it."""
    if isinstance(reader, list) or isinstance(writer, list):
        readers = reader if isinstance(reader, list) else [reader]
        for branch in writer if isinstance(writer, list) else [writer]:
            if not any(_readable(r, branch) for r in readers):
                raise _Incompatible(f"{path or 'value'}: union branch {_type_name(branch)} "
                                    "cannot be read")
        return
    rname, wname = _type_name(reader), _type_name(writer)
    if rname != wname and (wname, rname) not in _PROMOTIONS:
        raise _Incompatible(f"{path or 'value'}: type {wname} cannot be read as {rname}")
    if rname == "record":
        wfields = {f["name"]: f for f in writer.get("fields", [])}
        for field in reader.get("fields", []):
            name = field["name"]
            if name in wfields:
                _can_read(field["type"], wfields[name]["type"], f"{path}{name}.")
            elif "default" not in field:
                raise _Incompatible(f"field {path}{name} was added without a default")
    elif rname == "array":
        _can_read(reader["items"], writer["items"], path)
    elif rname == "map":
        _can_read(reader["values"], writer["values"], path)


def _readable(reader: Any, writer: Any) -> bool:
    try:
        _can_read(reader, writer)
        return True
    except _Incompatible:
        return False


def check_compatible(level: str, new: str, existing: list[str], schema_type: str) -> str | None:
    """None when ``new`` may be registered after ``existing`` (oldest first), else why not."""
    if level == "NONE" or not existing or schema_type != "AVRO":
        return None
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    mode = level.removesuffix("_TRANSITIVE")
    new_doc = json.loads(new)
    try:
        for old in against:
            old_doc = json.loads(old)
            if mode in ("BACKWARD", "FULL"):
                _can_read(new_doc, old_doc)
            if mode in ("FORWARD", "FULL"):
                _can_read(old_doc, new_doc)
    except _Incompatible as exc:
        return str(exc)
    return None


def _canonical(schema: str, schema_type: str) -> str:
    if schema_type in ("AVRO", "JSON"):
        try:
            return json.dumps(json.loads(schema), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return schema
    return schema


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema", "schemaType", ...}
        self.subjects: dict[str, list[int]] = {}  # subject -> schema id per version
        self.levels: dict[str, str] = {}  # subject or "" (global) -> compatibility


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, code: int, message: str) -> None:
        self._reply(status, {"error_code": code, "message": message})

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}") if length else {}

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/") if p]
        state = self.server.state
        with state.lock:
            try:
                self._dispatch(method, parts, state)
            except (ValueError, KeyError) as exc:
                self._error(422, 42201, f"invalid request: {exc}")

    def _dispatch(self, method: str, parts: list[str], state: _State) -> None:  # noqa: C901
        if parts[:2] == ["schemas", "ids"] and len(parts) >= 3 and method == "GET":
            sid = int(parts[2])
            if not 1 <= sid <= len(state.schemas):
                return self._error(404, 40403, f"Schema {sid} not found")
            entry = state.schemas[sid - 1]
            if len(parts) == 4 and parts[3] == "subjects":
                return self._reply(200, sorted(s for s, ids in state.subjects.items()
                                               if sid in ids))
            body = {"schema": entry["schema"], "references": entry.get("references", [])}
            if entry["schemaType"] != "AVRO":
                body["schemaType"] = entry["schemaType"]
            return self._reply(200, body)
        if parts == ["schemas", "types"]:
            return self._reply(200, ["AVRO", "JSON", "PROTOBUF"])
        if parts == ["subjects"] and method == "GET":
            return self._reply(200, sorted(s for s, ids in state.subjects.items() if ids))
        if parts and parts[0] == "config":
            key = parts[1] if len(parts) > 1 else ""
            if method == "PUT":
                level = str(self._body().get("compatibility", "")).upper()
                if level not in LEVELS:
                    return self._error(422, 42203, f"Invalid compatibility level {level!r}")
                state.levels[key] = level
                return self._reply(200, {"compatibility": level})
            level = state.levels.get(key) or state.levels.get("", "BACKWARD")
            return self._reply(200, {"compatibilityLevel": level})
        if parts and parts[0] == "subjects" and len(parts) >= 2:
            return self._subject(method, parts[1], parts[2:], state)
        if parts[:2] == ["compatibility", "subjects"] and method == "POST":
            body = self._body()
            subject = parts[2]
            existing = [state.schemas[i - 1]["schema"] for i in state.subjects.get(subject, [])]
            level = state.levels.get(subject) or state.levels.get("", "BACKWARD")
            why = check_compatible(level, body["schema"], existing,
                                   body.get("schemaType", "AVRO"))
            return self._reply(200, {"is_compatible": why is None,
                                     "messages": [why] if why else []})
        return self._error(404, 404, f"no such endpoint: {method} {self.path}")

    def _subject(self, method: str, subject: str, rest: list[str], state: _State) -> None:
        versions = state.subjects.get(subject, [])
        if method == "DELETE" and not rest:
            if not versions:
                return self._error(404, 40401, f"Subject '{subject}' not found.")
            state.subjects[subject] = []
            return self._reply(200, list(range(1, len(versions) + 1)))
        if method == "POST":
            body = self._body()
            schema_type = body.get("schemaType", "AVRO")
            canon = _canonical(body["schema"], schema_type)
            match = next((v for v, i in enumerate(versions, 1)
                          if state.schemas[i - 1]["canonical"] == canon), None)
            if not rest:  # look the schema up under the subject
                if match is None:
                    return self._error(404, 40403, "Schema not found")
                return self._reply(200, self._version_body(subject, match, state))
            if match is not None:
                return self._reply(200, {"id": versions[match - 1]})
            level = state.levels.get(subject) or state.levels.get("", "BACKWARD")
            existing = [state.schemas[i - 1]["schema"] for i in versions]
            why = check_compatible(level, body["schema"], existing, schema_type)
            if why:
                return self._error(409, 409, "Schema being registered is incompatible with an "
                                   f"earlier schema for subject \"{subject}\": {why}")
            sid = next((n for n, e in enumerate(state.schemas, 1) if e["canonical"] == canon
                        and e["schemaType"] == schema_type), None)
            if sid is None:
                state.schemas.append({"schema": body["schema"], "schemaType": schema_type,
                                      "canonical": canon,
                                      "references": body.get("references", [])})
                sid = len(state.schemas)
            state.subjects.setdefault(subject, []).append(sid)
            return self._reply(200, {"id": sid})
        if not versions:
            return self._error(404, 40401, f"Subject '{subject}' not found.")
        if rest == ["versions"]:
            return self._reply(200, list(range(1, len(versions) + 1)))
        if len(rest) == 2 and rest[0] == "versions":
            version = len(versions) if rest[1] in ("latest", "-1") else int(rest[1])
            if not 1 <= version <= len(versions):
                return self._error(404, 40402, f"Version {rest[1]} not found.")
            return self._reply(200, self._version_body(subject, version, state))
        return self._error(404, 404, f"no such endpoint: {self.path}")

    @staticmethod
    def _version_body(subject: str, version: int, state: _State) -> dict[str, Any]:
        sid = state.subjects[subject][version - 1]
        entry = state.schemas[sid - 1]
        return {"subject": subject, "version": version, "id": sid, "schema": entry["schema"],
                "schemaType": entry["schemaType"], "references": entry.get("references", [])}

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State


class EmbeddedSchemaRegistry:
    """The registry on ``127.0.0.1:<port>`` (0: a free port) in a thread of this process."""

    def __init__(self, port: int = 0) -> None:
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.state = _State()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> EmbeddedSchemaRegistry:
        server = _Server(("127.0.0.1", self._port), _Handler)
        server.state = self.state
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="schema-registry",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering (schemas are kept, so ``start`` again serves the same ids)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> EmbeddedSchemaRegistry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

