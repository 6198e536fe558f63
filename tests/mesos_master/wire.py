"""Wire format of the master's HTTP API: RecordIO framing, media types, answers and routes.

The checks follow `Master::Http::scheduler` (src/master/http.cpp) in its order:
405 for a non-POST, 400 without Content-Type, 415 for a Content-Type that is not exactly
`application/json` or `application/x-protobuf`, 400 for a body that is not JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

APPLICATION_JSON = "application/json"
APPLICATION_PROTOBUF = "application/x-protobuf"
TEXT_PLAIN = "text/plain; charset=utf-8"


def encode_record(data: bytes) -> bytes:
    """`record = record-size LF record-data` (docs/recordio.md); no trailing delimiter."""
    return str(len(data)).encode("ascii") + b"\n" + data


class RecordIODecoder:
    """Incremental decoder: feed arbitrary chunks, get whole records back."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        records = []
        while True:
            newline = self._buffer.find(b"\n")
            if newline < 0:
                return records
            header = self._buffer[:newline]
            if not header.isdigit():
                raise ValueError(f"bad RecordIO length {header[:32]!r}")
            size = int(header)
            end = newline + 1 + size
            if len(self._buffer) < end:
                return records
            records.append(self._buffer[newline + 1 : end])
            self._buffer = self._buffer[end:]


def dump(obj: Any) -> bytes:
    """Compact JSON, as stout's jsonify writes it."""
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


@dataclass
class Answer:
    """A complete (non-streaming) HTTP response."""

    status: int
    body: bytes = b""
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, status: int, message: str, **headers: str) -> Answer:
        return cls(status, message.encode("utf-8"), TEXT_PLAIN, dict(headers))

    @classmethod
    def json(cls, obj: Any, status: int = 200) -> Answer:
        return cls(status, dump(obj), APPLICATION_JSON)


ACCEPTED = Answer(202)


def method_not_allowed(method: str, allowed: tuple[str, ...] = ("POST",)) -> Answer:
    quoted = "', '".join(allowed)
    return Answer.text(
        405, f"Expecting one of {{ '{quoted}' }}, but received '{method}'", Allow=", ".join(allowed)
    )


def parse_call_body(content_type: str | None, body: bytes) -> Any | Answer:
    """The Content-Type and body checks shared by the scheduler and operator endpoints."""
    if content_type is None:
        return Answer.text(400, "Expecting 'Content-Type' to be present")
    if content_type == APPLICATION_PROTOBUF:
        # A simplification: the test master speaks JSON only.
        return Answer.text(415, "The test master does not decode application/x-protobuf")
    if content_type != APPLICATION_JSON:
        return Answer.text(
            415, f"Expecting 'Content-Type' of {APPLICATION_JSON} or {APPLICATION_PROTOBUF}"
        )
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return Answer.text(400, f"Failed to parse body into JSON: {exc}")


def accepts(accept: str | None, media_type: str) -> bool:
    """`Request::acceptsMediaType`: no header accepts all; q=0 excludes."""
    if accept is None or not accept.strip():
        return True
    main, _, sub = media_type.partition("/")
    best: tuple[int, float] | None = None  # (specificity, q)
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        candidate = fields[0].lower()
        q = 1.0
        for param in fields[1:]:
            key, _, raw = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(raw)
                except ValueError:
                    q = 0.0
        c_main, _, c_sub = candidate.partition("/")
        if candidate == "*/*":
            specificity = 0
        elif c_main == main and c_sub == "*":
            specificity = 1
        elif c_main == main and c_sub == sub:
            specificity = 2
        else:
            continue
        if best is None or specificity > best[0]:
            best = (specificity, q)
    return best is not None and best[1] > 0


def accept_check(accept: str | None) -> Answer | None:
    if accepts(accept, APPLICATION_JSON):
        return None
    if accepts(accept, APPLICATION_PROTOBUF):
        return Answer.text(406, "The test master does not encode application/x-protobuf")
    return Answer.text(
        406, f"Expecting 'Accept' to allow '{APPLICATION_PROTOBUF}' or '{APPLICATION_JSON}'"
    )


# Master routes, matched like libprocess: the longest whole-component prefix wins, and a
# path without the `/master` prefix reaches the master process too (its delegate).
MASTER_ROUTES = ("/api/v1/scheduler", "/api/v1", "/state", "/state.json", "/slaves")
TOP_ROUTES = ("/version", "/metrics/snapshot")


def route(path: str) -> str | None:
    path = path.split("?", 1)[0].rstrip("/") or "/"
    for top in TOP_ROUTES:
        if path == top or path.startswith(top + "/"):
            return top
    if path == "/master" or path.startswith("/master/"):
        path = path[len("/master") :] or "/"
    best = None
    for candidate in MASTER_ROUTES:
        if (path == candidate or path.startswith(candidate + "/")) and (
            best is None or len(candidate) > len(best)
        ):
            best = candidate
    return best
