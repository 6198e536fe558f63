"""The master's HTTP endpoint: routes, the scheduler call pipeline and the SUBSCRIBE stream."""

from __future__ import annotations

import contextlib
import queue
import select
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import calls, events, operator_api, schema, wire
from .core import MasterCore, RecordedCall
from .state import Subscription

IDLE_TIMEOUT_S = 60.0  # a kept-alive connection with no request is closed after this
STREAM_POLL_S = 0.1


class MasterHTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every handler thread
    block_on_close = True

    def __init__(self, core: MasterCore, port: int = 0) -> None:
        self.core = core
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", port), _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _peer_closed(sock: socket.socket) -> bool:
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = IDLE_TIMEOUT_S
    server: MasterHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, answer: wire.Answer) -> None:
        self.send_response(answer.status)
        if answer.content_type is not None:
            self.send_header("Content-Type", answer.content_type)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer.body)

    def _dispatch(self) -> None:
        body = self._read_body()
        target = wire.route(self.path)
        core = self.server.core
        if target == "/api/v1/scheduler":
            self._scheduler(body)
            return
        if target is None:
            answer = wire.Answer(404)
        elif target == "/api/v1":
            answer = self._operator(body)
        elif target in ("/state", "/state.json"):
            with core.lock:
                answer = wire.Answer.json(operator_api.master_state(core))
        elif target == "/slaves":  # the agents part of /state, as the real master has it
            with core.lock:
                state = operator_api.master_state(core)
            answer = wire.Answer.json({"slaves": state["slaves"],
                                       "recovered_slaves": state["recovered_slaves"]})
        elif target == "/version":
            answer = wire.Answer.json(operator_api.version())
        else:
            with core.lock:
                answer = wire.Answer.json(operator_api.metrics(core))
        self._answer(answer)

    def _operator(self, body: bytes) -> wire.Answer:
        if self.command != "POST":
            return wire.method_not_allowed(self.command)
        parsed = wire.parse_call_body(self.headers.get("Content-Type"), body)
        if isinstance(parsed, wire.Answer):
            return parsed
        refused = wire.accept_check(self.headers.get("Accept"))
        return refused or operator_api.operator_call(self.server.core, parsed)

    def _scheduler(self, body: bytes) -> None:
        core = self.server.core
        stream_id = self.headers.get("Mesos-Stream-Id")
        record = RecordedCall(None, None, stream_id, None, 0)
        answer = self._scheduler_answer(body, stream_id, record)
        if answer is not None:
            record.status = answer.status
            with core.lock:
                core.calls.append(record)
            self._answer(answer)

    def _scheduler_answer(
        self, body: bytes, stream_id: str | None, record: RecordedCall
    ) -> wire.Answer | None:
        """The answer, or None once a SUBSCRIBE stream has been served."""
        core = self.server.core
        if self.command != "POST":
            return wire.method_not_allowed(self.command)
        parsed = wire.parse_call_body(self.headers.get("Content-Type"), body)
        if isinstance(parsed, wire.Answer):
            return parsed
        record.body = parsed
        if isinstance(parsed, dict):
            record.type = parsed.get("type") if isinstance(parsed.get("type"), str) else None
            fid = parsed.get("framework_id")
            record.framework_id = fid.get("value") if isinstance(fid, dict) else None
        try:
            call = schema.convert_call(parsed)
        except schema.ConversionError as exc:
            return wire.Answer.text(400, f"Failed to convert JSON into Call protobuf: {exc}")
        problem = schema.validate_call(call)
        if problem is not None:
            return wire.Answer.text(400, f"Failed to validate scheduler::Call: {problem}")
        injected = core.take_injected(call["type"])
        if injected is not None:
            return injected
        if call["type"] in ("SUBSCRIBE", "RECONCILE_OPERATIONS"):
            refused = wire.accept_check(self.headers.get("Accept"))
            if refused is not None:
                return refused
        if call["type"] != "SUBSCRIBE":
            return calls.handle(core, call, stream_id)
        if stream_id is not None:
            return wire.Answer.text(
                400, "Subscribe calls should not include the 'Mesos-Stream-Id' header"
            )
        record.status = 200
        with core.lock:
            core.calls.append(record)
        self._stream(call["subscribe"])
        return None

    def _stream(self, subscribe: dict[str, Any]) -> None:
        core = self.server.core
        sub = Subscription(str(uuid.uuid4()), "", self.connection)
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", wire.APPLICATION_JSON)
        self.send_header("Mesos-Stream-Id", sub.stream_id)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        core.subscribe(sub, subscribe)
        next_heartbeat = time.monotonic() + core.heartbeat_interval
        try:
            while True:
                try:
                    data = sub.events.get(timeout=STREAM_POLL_S)
                except queue.Empty:
                    if _peer_closed(self.connection):
                        return
                    if time.monotonic() >= next_heartbeat:
                        next_heartbeat += core.heartbeat_interval
                        if sub.framework_id:
                            core.record_heartbeat(sub.framework_id)
                        self._chunk(wire.encode_record(wire.dump(events.heartbeat())))
                    continue
                if data is Subscription.DROP:
                    return
                if data is Subscription.CLOSE:
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self._chunk(wire.encode_record(data))
        except OSError:
            return
        finally:
            sub.finished.set()
            core.stream_ended(sub)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
