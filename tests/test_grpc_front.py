"""The gRPC port's per-address connection limit (allocator/broker/grpc_front.py), against a
real `fairbroker serve` subprocess on loopback: distinct 127.x.y.z source addresses act as
distinct clients."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from support.polling import wait_for
from support.serving import start_serve, stop_gracefully

from allocator.broker.client import BrokerClient
from allocator.broker.grpc_front import client_key

# An HTTP/2 client's opening (the preface and an empty SETTINGS frame): the gRPC server
# answers with its own SETTINGS frame, so the connection is through the handshake and held
# until the idle deadline (30 s).
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SETTINGS = 0x04


def test_client_key_counts_ipv4_as_is_and_ipv6_by_its_64() -> None:
    assert client_key("127.0.0.2") == "127.0.0.2"
    assert client_key("::ffff:10.1.2.3") == "10.1.2.3"  # a dual-stack socket's IPv4 client
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff:7") == "2001:db8::/64"
    assert client_key("2001:db8:0:1::1") == "2001:db8:0:1::/64"
    assert client_key("fe80::1%eth0") == "fe80::/64"


def _open(port: int, source: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    return sock


def _answer_to(port: int, source: str) -> str:
    """`_answer` on a new connection from `source`; 'reset' also when the reset comes before
    connect returns (the front accepts and resets at once, which on a loaded machine can
    beat the client's own connect call)."""
    try:
        sock = _open(port, source)
    except ConnectionResetError:
        return "reset"
    with sock:
        return _answer(sock)


def _answer(sock: socket.socket) -> str:
    """'settings' when the gRPC server answered the HTTP/2 opening, 'reset' when the
    connection was refused (reset or closed before any answer)."""
    try:
        sock.sendall(PREFACE)
        head = sock.recv(9)
    except (ConnectionResetError, BrokenPipeError):
        return "reset"
    if not head:
        return "reset"
    assert len(head) >= 4 and head[3] == SETTINGS, head
    return "settings"


def _grpc_served(port: int) -> bool:
    with BrokerClient(f"127.0.0.1:{port}", timeout=10) as client:
        return client.allocation() is not None


@pytest.mark.live
def test_one_address_cannot_take_every_grpc_connection(tmp_path: Path) -> None:
    """With grpc_connections_per_address 3, a fourth connection from 127.0.0.2 is reset at
    once while its three are held (the gRPC server has room for 128), connections from
    127.0.0.3 and a real gRPC client from 127.0.0.1 are served meanwhile, and 127.0.0.2
    gets in again once it closes one; the refusal is logged with the address. The gRPC
    server's Unix socket is an abstract one: no file in the temporary directory, and gone
    with the process."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    process, _, grpc_port, err = start_serve(
        ["--port", "0", "--grpc-port", "0", "--no-metrics", "--sandbox", "none",
         "--state-dir", str(tmp_path / "state"), "--grpc-connections-per-address", "3"],
        tmp_path, env=env,
    )  # fmt: skip
    held: list[socket.socket] = []
    try:
        assert _abstract_sockets(process.pid), "the gRPC server's abstract socket"
        held = [_open(grpc_port, "127.0.0.2") for _ in range(3)]
        assert [_answer(s) for s in held] == ["settings"] * 3
        assert _answer_to(grpc_port, "127.0.0.2") == "reset"  # a fourth

        others = [_open(grpc_port, "127.0.0.3") for _ in range(2)]
        try:
            assert [_answer(s) for s in others] == ["settings"] * 2
        finally:
            for s in others:
                s.close()
        assert _grpc_served(grpc_port)  # from 127.0.0.1, a real client's call

        held.pop().close()

        def admitted() -> bool:
            return _answer_to(grpc_port, "127.0.0.2") == "settings"

        wait_for(admitted, 30, "127.0.0.2 admitted again after closing one of its three")
        log = err.read_text()
        assert "connections refused: more than 3 at once from one address" in log, log[-2000:]
        assert "(last: 127.0.0.2)" in log
    finally:
        for s in held:
            s.close()
        status = stop_gracefully(process)
    assert status == 0, err.read_text()[-2000:]
    assert list(private_tmp.iterdir()) == []  # nothing left in the temporary directory
    assert _abstract_sockets(process.pid) == []


def _abstract_sockets(pid: int) -> list[str]:
    """The listening abstract Unix sockets of the gRPC relay of broker `pid`."""
    prefix = f"@fairbroker-grpc-{pid}-"
    lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    return [line.split()[-1] for line in lines if line.split()[-1].startswith(prefix)]
