"""Before a server starts: can it listen where it was told to? One-line answers for a port in
use (another broker?), a host that is not this machine's, two services on one port.

The check binds each port once and lets go, so it holds whatever server is started after it
(HTTP, gRPC, metrics); the servers then bind for real.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Sequence

from allocator.errors import FairbrokerError


class ListenError(FairbrokerError):
    """A host or port a server cannot listen on."""


def _address(host: str) -> tuple[socket.AddressFamily, str]:
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenError(f"--host {host}: cannot resolve ({error.strerror})") from None
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


def check_can_listen(host: str, ports: Sequence[tuple[str, int | None]]) -> None:
    """Raise ListenError unless every (option, port) can be bound on `host` (port 0: any free
    port; None: the service is off)."""
    family, address = _address(host)
    taken: dict[int, str] = {}
    for option, port in [*ports, ("--host", 0)]:  # port 0 checks the address alone
        if port is None:
            continue
        if port and port in taken:
            raise ListenError(f"{option} {port}: the same port as {taken[port]}")
        taken[port] = option
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # SO_REUSEADDR: a port left in TIME_WAIT by a stopped broker is free; a listening
            # socket (even one with SO_REUSEPORT, as gRPC's) still makes the bind fail.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((address, port))
            except OSError as error:
                raise _explain(error, host, option, port) from None


def _explain(error: OSError, host: str, option: str, port: int) -> ListenError:
    if error.errno == errno.EADDRINUSE:
        return ListenError(f"port {port} on {host} is in use (another broker?); see {option}")
    if error.errno == errno.EADDRNOTAVAIL:
        return ListenError(f"--host {host}: not an address of this machine")
    if error.errno == errno.EACCES:
        return ListenError(f"{option} {port}: permission denied (ports below 1024 need root)")
    return ListenError(f"{option} {port} on {host}: cannot listen ({error.strerror})")
