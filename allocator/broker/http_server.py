"""The tenant API over HTTP/JSON, for the JVM plugin: POST /v1/<Method> with the request
message in protobuf's JSON mapping; errors come back as {"error": ..., "code": ...}."""

from __future__ import annotations

import json
import logging
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format

from allocator.broker.api import (
    CALLS,
    HTTP_STATUS,
    MAX_REQUEST_BYTES,
    RequestObserver,
    check_token,
)
from allocator.broker.core import ApiError, Broker

log = logging.getLogger(__name__)

DRAIN_LIMIT_BYTES = 16 << 20


class _Handler(BaseHTTPRequestHandler):
    server: TenantHttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http %s", format % args)

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, error: ApiError, method: str) -> None:
        self.server.observe(method, error.code)
        body = json.dumps({"error": str(error), "code": error.code}).encode()
        self._reply(HTTP_STATUS.get(error.code, 500), body)

    def _discard(self, length: int) -> None:
        """Read an oversized body so the client sees the answer, not a reset connection;
        beyond DRAIN_LIMIT_BYTES the connection is simply closed."""
        left = length if 0 < length <= DRAIN_LIMIT_BYTES else 0
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                return
            left -= len(chunk)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(200, b'{"ok": true}')
        elif self.path == "/v1/GetAllocation":
            self._call("GetAllocation", b"{}")
        else:
            self._error(ApiError("NOT_FOUND", f"no such path {self.path}"), "")

    def do_POST(self) -> None:
        method = self.path.removeprefix("/v1/")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > MAX_REQUEST_BYTES:
            self.close_connection = True
            self._discard(length)
            self._error(
                ApiError(
                    "RESOURCE_EXHAUSTED",
                    f"request body of {length} bytes; the limit is {MAX_REQUEST_BYTES}",
                ),
                method,
            )
            return
        body = self.rfile.read(length)
        content_type = self.headers.get("Content-Type", "")
        if content_type.split(";")[0].strip() != "application/json":
            self.send_response(HTTPStatus.UNSUPPORTED_MEDIA_TYPE)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.server.observe(method, "UNSUPPORTED_MEDIA_TYPE")
            return
        self._call(method, body)

    def _call(self, method: str, body: bytes) -> None:
        try:
            call = CALLS.get(method)
            if call is None:
                raise ApiError("UNIMPLEMENTED", f"no such call {method!r}; calls: {sorted(CALLS)}")
            check_token(self.server.token, self.headers.get("Authorization"))
            try:
                request = json_format.Parse(body or b"{}", call.request_type())
            except json_format.ParseError as error:
                raise ApiError("INVALID_ARGUMENT", f"malformed {method} request: {error}") from None
            reply = call.handler(self.server.broker, request)
        except ApiError as error:
            self._error(error, method)
            return
        except Exception as error:  # never let one request take the server down
            log.exception("HTTP %s failed", method)
            self._error(ApiError("INTERNAL", f"internal error: {error}"), method)
            return
        self.server.observe(method, "OK")
        self._reply(200, json_format.MessageToJson(reply, indent=None).encode())


class TenantHttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        broker: Broker,
        address: tuple[str, int],
        token: str | None = None,
        observer: RequestObserver | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.broker = broker
        self.token = token
        self._observer = observer
        self._thread: threading.Thread | None = None

    def handle_error(self, request: object, client_address: tuple) -> None:
        """A client that hangs up before its answer (a driver stopping with a short timeout)
        is routine; anything else is logged, never printed as a bare traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError)):
            log.debug("client %s went away before its answer", client_address)
        else:
            log.exception("HTTP request from %s failed", client_address)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def observe(self, method: str, code: str) -> None:
        if self._observer is not None:
            self._observer("http", method, code)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="tenant-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
