"""`--ha zk://HOST:PORT[,HOST:PORT...]/PATH`: where brokers elect their leader and keep state.

Parsed without importing kazoo, so the serve configuration can check it at load time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")
_PATH_PART = re.compile(r"[A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class ZkUrl:
    hosts: tuple[tuple[str, int], ...]
    path: str  # absolute, no trailing slash, never "/"

    @property
    def connect_string(self) -> str:
        """kazoo's `hosts`: HOST:PORT,HOST:PORT."""
        return ",".join(f"{host}:{port}" for host, port in self.hosts)

    def __str__(self) -> str:
        return f"zk://{self.connect_string}{self.path}"


def parse_zk_url(text: str) -> ZkUrl:
    """zk://HOST:PORT[,HOST:PORT...]/PATH; ValueError naming what is wrong. The path must be
    a dedicated one (not "/"): the brokers' election and state live under it."""
    if not text.startswith("zk://"):
        raise ValueError(f"expected zk://HOST:PORT[,HOST:PORT...]/PATH, got {text[:200]!r}")
    rest = text.removeprefix("zk://")
    hosts_part, slash, path = rest.partition("/")
    if not slash or not path.strip("/"):
        raise ValueError("needs a path after the hosts (zk://HOST:PORT/fairbroker)")
    hosts = []
    for item in hosts_part.split(","):
        match = _HOST_PORT.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"not HOST:PORT: {item[:100]!r}")
        port = int(match["port"])
        if not 0 < port < 65536:
            raise ValueError(f"port out of range: {item[:100]!r}")
        hosts.append((match["host"], port))
    parts = path.strip("/").split("/")
    for part in parts:
        if not _PATH_PART.fullmatch(part) or part in (".", "..") or part == "zookeeper":
            raise ValueError(f"bad path component {part[:100]!r} (letters, digits, _ . -)")
    return ZkUrl(tuple(hosts), "/" + "/".join(parts))
