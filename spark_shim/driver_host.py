"""Which address a Spark driver advertises to its executors (`spark.driver.host`).

Executors connect back to the driver, so the address must be reachable from the agents. A
broker on loopback means a one-host setup: 127.0.0.1 is right and needs no DNS. Otherwise
the driver uses the address this host routes to the broker from (the agents sit on the same
network as the broker), found by connecting a UDP socket, which sends nothing. When there is
no such route, or it is loopback too, the key is left to Spark's own default (the address
of this host's name).
"""

from __future__ import annotations

import ipaddress
import socket

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def routable_address(host: str, port: int) -> str | None:
    """The local address the kernel would use to reach host:port (None: no route)."""
    try:
        family, kind, proto, _, target = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.connect(target)
            return str(probe.getsockname()[0])
    except OSError:
        return None


def driver_host(broker: str) -> tuple[str | None, str]:
    """(spark.driver.host or None for Spark's default, the reason in words) for a broker
    given as HOST:PORT."""
    host, _, port = broker.strip().rpartition(":")
    host = host.strip("[]")
    if _is_loopback(host):
        return "127.0.0.1", "spark.driver.host=127.0.0.1 (the broker is on loopback)"
    address = routable_address(host, int(port))
    if address is None or _is_loopback(address):
        return None, (
            f"spark.driver.host left to Spark's default (this host's name): no route to {host} "
            "from a non-loopback address; set --conf spark.driver.host=ADDRESS if the agents "
            "cannot resolve this host's name"
        )
    return address, f"spark.driver.host={address} (this host's address towards {host})"
