"""The tenant API over HTTP/JSON, for the JVM plugin: POST /v1/<Method> with the request
message in protobuf's JSON mapping; errors come back as {"error": ..., "code": ...}.

A small ASGI app served by uvicorn (`allocator.broker.asgi`); the broker's calls, which take
its lock, run on a bounded thread pool so the event loop keeps accepting and timing out
connections while an allocation run holds the lock.
"""

from __future__ import annotations

import asyncio
import json
import logging
from concurrent.futures import ThreadPoolExecutor

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from allocator.broker.api import (
    CALLS,
    HTTP_STATUS,
    MAX_REQUEST_BYTES,
    RequestObserver,
    check_token,
)
from allocator.broker.asgi import AsgiServer, HttpLimits, Receive, Scope, Send, read_body, respond
from allocator.broker.core import ApiError, Broker
from allocator.broker.tls import TlsFiles
from allocator.broker.validation import printable

log = logging.getLogger(__name__)

JSON = "application/json"
TIMED_OUT = b'{"error": "the request body did not arrive in time", "code": "DEADLINE_EXCEEDED"}'
WRONG_TYPE = b'{"error": "Content-Type must be application/json", "code": "INVALID_ARGUMENT"}'
HANDLER_THREADS = 16


class TenantHttpServer:
    def __init__(
        self,
        broker: Broker,
        address: tuple[str, int],
        token: str | None = None,
        observer: RequestObserver | None = None,
        limits: HttpLimits | None = None,
        tls: TlsFiles | None = None,
    ) -> None:
        self.broker = broker
        self.token = token
        self._observer = observer
        self.limits = limits or HttpLimits(max_body_bytes=MAX_REQUEST_BYTES)
        self._pool = ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="tenant-http")
        host, port = address
        self._server = AsgiServer(self._app, host, port, self.limits, "tenant-http", tls)

    @property
    def port(self) -> int:
        return self._server.port

    def start(self) -> None:
        self._server.start()

    def stop(self) -> None:
        self._server.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def server_close(self) -> None:
        """Release the port of a server that was never started."""
        self._server.close()
        self._pool.shutdown(wait=False)

    def observe(self, method: str, code: str) -> None:
        if self._observer is not None:
            self._observer("http", method, code)

    # ---- the ASGI app ------------------------------------------------------------------
    async def _app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method = scope["path"].removeprefix("/v1/")
        try:
            status, body = await self._handle(scope, receive, method)
        except ApiError as error:
            self.observe(method, error.code)
            status = HTTP_STATUS.get(error.code, 500)
            body = json.dumps({"error": str(error), "code": error.code}).encode()
        except (TimeoutError, ConnectionError):
            log.debug("client %s: body not received in time or went away", scope.get("client"))
            await respond(send, 408, TIMED_OUT, JSON, close=True)
            return
        await respond(send, status, body, JSON, close=status in (400, 413))

    async def _handle(self, scope: Scope, receive: Receive, method: str) -> tuple[int, bytes]:
        verb, path = scope["method"], scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        standby = self.broker.standby()
        if verb == "GET" and path == "/healthz":
            if standby is not None:  # --ha: a standby is not a broker to send tenants to
                return 503, json.dumps({"ok": False, "standby": True, "reason": standby}).encode()
            # unhealthy (the allocation loop, or Mesos: not subscribed): 503 and why
            report = self.broker.health()
            return (200 if report["ok"] else 503), json.dumps(report).encode()
        if verb == "GET" and path == "/v1/GetAllocation":
            return await self._call("GetAllocation", b"{}", headers)
        if verb != "POST" or not path.startswith("/v1/"):
            raise ApiError("NOT_FOUND", f"no such path {printable(verb)} {printable(path[:200])}")
        if "transfer-encoding" in headers and "content-length" in headers:
            # RFC 9112 6.1 lets a server refuse this (the classic smuggling shape); we do
            raise ApiError("INVALID_ARGUMENT", "both Transfer-Encoding and Content-Length")
        body = await read_body(receive, self.limits)
        if body is None:
            raise _too_large(headers.get("content-length"), self.limits.max_body_bytes)
        if headers.get("content-type", "").split(";")[0].strip().lower() != JSON:
            self.observe(method, "UNSUPPORTED_MEDIA_TYPE")
            return 415, WRONG_TYPE
        return await self._call(method, body, headers)

    async def _call(self, method: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        call = CALLS.get(method)
        if call is None:
            raise ApiError(
                "UNIMPLEMENTED",
                f"no such call {printable(repr(method[:100]))}; calls: {sorted(CALLS)}",
            )
        check_token(self.token, headers.get("authorization"))
        standby = self.broker.standby()
        if standby is not None:
            raise ApiError("UNAVAILABLE", standby)
        try:
            text = body.decode("utf-8") if body else "{}"
            request = json_format.Parse(text, call.request_type())
            refuse_booleans_as_numbers(json.loads(text), call.request_type.DESCRIPTOR)
        except (UnicodeDecodeError, json_format.ParseError) as error:
            message = printable(str(error))[:500]
            raise ApiError("INVALID_ARGUMENT", f"malformed {method} request: {message}") from None
        loop = asyncio.get_running_loop()
        try:
            reply = await loop.run_in_executor(self._pool, call.handler, self.broker, request)
        except ApiError:
            raise
        except Exception as error:  # never let one request take the server down
            log.exception("HTTP %s failed", method)
            raise ApiError("INTERNAL", f"internal error: {type(error).__name__}") from None
        self.observe(method, "OK")
        return 200, reply_json(reply)


def reply_json(reply: Message) -> bytes:
    """A reply in protobuf's JSON mapping. A heartbeat's `leaving` is always there, `[]`
    when empty (the JVM plugin's contract), though proto3 JSON leaves an empty list out."""
    data = json_format.MessageToDict(reply)
    if reply.DESCRIPTOR.name == "HeartbeatReply":
        data.setdefault("leaving", [])
    return json.dumps(data, separators=(", ", ": ")).encode()


_NUMBERS = {
    FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_INT32,
    FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64,
}  # fmt: skip


def refuse_booleans_as_numbers(data: object, descriptor: Descriptor, path: str = "") -> None:
    """protobuf's JSON parser takes `true` for a number field as 1 (a Python bool is an int):
    `"weight": true` would register a tenant of weight 1. Refuse it, naming the field."""
    if not isinstance(data, dict):
        return
    fields = {**descriptor.fields_by_name, **{f.json_name: f for f in descriptor.fields}}
    for key, value in data.items():
        field = fields.get(key)
        if field is None:
            continue
        where = f"{path}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name["value"]
            values = value.values() if isinstance(value, dict) else ()
            _check_values(values, entry, where)
        else:
            repeated = _is_repeated(field) and isinstance(value, list)
            _check_values(value if repeated else [value], field, where)


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 7 dropped `label` for `is_repeated`, which protobuf 5 lacks
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return field.label == FieldDescriptor.LABEL_REPEATED


def _check_values(values, field: FieldDescriptor, where: str) -> None:
    for value in values:
        if isinstance(value, bool) and field.cpp_type in _NUMBERS:
            raise json_format.ParseError(f"{where}: expected a number, got {json.dumps(value)}")
        if field.message_type is not None:
            refuse_booleans_as_numbers(value, field.message_type, f"{where}.")


def _too_large(length: str | None, limit: int) -> ApiError:
    size = f"a request body of {length} bytes" if length else "a request body"
    return ApiError("RESOURCE_EXHAUSTED", f"{size}; the limit is {limit}")
