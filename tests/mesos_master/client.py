"""A raw v1 scheduler client for conformance tests.

It reads the SUBSCRIBE response off a plain socket and decodes HTTP chunks and RecordIO
itself (it shares no code with the master's encoder), keeping the raw chunks so a test can
check the framing byte for byte.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

Event = dict[str, Any]


class StreamError(Exception):
    pass


class SchedulerStream:
    def __init__(self, address: str, framework_info: dict[str, Any], *,
                 framework_id: str | None = None, suppressed_roles: list[str] | None = None,
                 headers: dict[str, str] | None = None, timeout: float = 10.0) -> None:  # fmt: skip
        self.host, port = address.rsplit(":", 1)
        self.port = int(port)
        self.framework_info = dict(framework_info)
        self.timeout = timeout
        self.extra_headers = headers or {}
        call: dict[str, Any] = {"type": "SUBSCRIBE", "subscribe": {}}
        if framework_id is not None:
            call["framework_id"] = {"value": framework_id}
            self.framework_info["id"] = {"value": framework_id}
        call["subscribe"]["framework_info"] = self.framework_info
        if suppressed_roles:
            call["subscribe"]["suppressed_roles"] = suppressed_roles
        self.subscribe_call = call
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""
        self.chunks: list[bytes] = []
        self.received: list[Event] = []
        self.received_at: list[float] = []  # time.monotonic() of each event's arrival
        self.ended = threading.Event()
        self.clean_end = False
        self._cursor = 0
        self._cond = threading.Condition()
        self._sock: socket.socket | None = None
        self._reader: threading.Thread | None = None
        self._buffer = b""

    # the stream ------------------------------------------------------------------------

    def open(self) -> SchedulerStream:
        payload = json.dumps(self.subscribe_call).encode()
        headers = {
            "Host": f"{self.host}:{self.port}", "Content-Type": "application/json",
            "Accept": "application/json", "Content-Length": str(len(payload)),
            **self.extra_headers,
        }  # fmt: skip
        request = "POST /api/v1/scheduler HTTP/1.1\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items()
        )
        self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        self._sock.sendall(request.encode() + b"\r\n" + payload)
        head = self._read_until(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
        if self.headers.get("transfer-encoding") == "chunked":
            self._reader = threading.Thread(target=self._read_stream, name="scheduler-stream")
            self._reader.start()
        else:
            self.body = self._read_exact(int(self.headers.get("content-length", "0")))
            self.ended.set()
        return self

    @property
    def stream_id(self) -> str | None:
        return self.headers.get("mesos-stream-id")

    @property
    def framework_id(self) -> str:
        """From the latest SUBSCRIBED (waiting for one if none came yet)."""
        with self._cond:
            subscribed = [e for e in self.received if e.get("type") == "SUBSCRIBED"]
        if not subscribed:
            subscribed = [self.next_event("SUBSCRIBED", consume=False)]
        return str(subscribed[-1]["subscribed"]["framework_id"]["value"])

    def _recv(self) -> bytes:
        assert self._sock is not None
        data = self._sock.recv(65536)
        if not data:
            raise StreamError("connection closed")
        return data

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buffer:
            self._buffer += self._recv()
        head, _, self._buffer = self._buffer.partition(marker)
        return head

    def _read_exact(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._buffer += self._recv()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _read_stream(self) -> None:
        assert self._sock is not None
        self._sock.settimeout(None)
        pending = b""
        try:
            while True:
                size = int(self._read_until(b"\r\n").split(b";")[0], 16)
                if size == 0:
                    self.clean_end = True
                    return
                chunk = self._read_exact(size)
                if self._read_exact(2) != b"\r\n":
                    raise StreamError("chunk not followed by CRLF")
                self.chunks.append(chunk)
                pending += chunk
                while b"\n" in pending:
                    header, _, rest = pending.partition(b"\n")
                    length = int(header)
                    if len(rest) < length:
                        break
                    record, pending = rest[:length], rest[length:]
                    with self._cond:
                        self.received.append(json.loads(record))
                        self.received_at.append(time.monotonic())
                        self._cond.notify_all()
        except (OSError, StreamError, ValueError):
            return
        finally:
            self.ended.set()
            with self._cond:
                self._cond.notify_all()

    def next_event(self, event_type: str | None = None, timeout: float = 10.0,
                   consume: bool = True) -> Event:  # fmt: skip
        """The next event (of `event_type`) after the cursor; skipped events stay in `received`."""
        return self.wait_event(
            lambda e: event_type is None or e.get("type") == event_type, timeout, consume,
            what=event_type or "any event",
        )  # fmt: skip

    def wait_event(self, predicate: Callable[[Event], bool], timeout: float = 10.0,
                   consume: bool = True, what: str = "event") -> Event:  # fmt: skip
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(self._cursor, len(self.received)):
                    if predicate(self.received[i]):
                        if consume:
                            self._cursor = i + 1
                        return self.received[i]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no {what} within {timeout} s; got {self.types()}")
                if self.ended.is_set():
                    raise StreamError(f"stream ended before {what}; got {self.types()}")
                self._cond.wait(min(left, 0.2))

    def unread(self, event_type: str | None = None) -> list[Event]:
        """Events after the cursor (of `event_type`), without consuming them."""
        with self._cond:
            rest = self.received[self._cursor :]
        return [e for e in rest if event_type is None or e.get("type") == event_type]

    def skip_all(self) -> None:
        """Move the cursor past everything received so far."""
        with self._cond:
            self._cursor = len(self.received)

    def types(self) -> list[str]:
        return [str(e.get("type")) for e in self.received]

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        if self._reader is not None:
            self._reader.join(self.timeout)

    def __enter__(self) -> SchedulerStream:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # calls -----------------------------------------------------------------------------

    def call(self, body: dict[str, Any] | bytes, *, stream_id: str | None = "",
             content_type: str | None = "application/json", method: str = "POST",
             path: str = "/api/v1/scheduler",
             headers: dict[str, str] | None = None) -> tuple[int, str]:  # fmt: skip
        """One request on its own connection; `stream_id=""` means this stream's id."""
        sent: dict[str, str] = dict(headers or {})
        if content_type is not None:
            sent["Content-Type"] = content_type
        sid = self.stream_id if stream_id == "" else stream_id
        if sid is not None:
            sent["Mesos-Stream-Id"] = sid
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=payload, headers=sent)
            answer = conn.getresponse()
            return answer.status, answer.read().decode("utf-8", "replace")
        finally:
            conn.close()

    def framework_call(self, call_type: str, **fields: Any) -> tuple[int, str]:
        body: dict[str, Any] = {"type": call_type, "framework_id": {"value": self.framework_id}}
        body.update(fields)
        return self.call(body)
