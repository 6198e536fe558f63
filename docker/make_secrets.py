"""The compose cluster's secrets, drawn on its first start and kept after (compose.yaml's
one-shot `secrets` service; nothing secret is in compose.yaml or .env).

Each secret goes to its own volume, so that a service mounts only what it needs: the tenant
token (broker and Spark drivers), the broker's Mesos secret (broker and the quota job), the
masters' credentials (every principal), the agents' credential (the agents), Grafana's admin
password (Grafana). A file that exists is kept; the masters' credentials are rewritten from
the two secrets on every start, so they always match. Standard library only: it runs in the
broker image as root (a fresh volume is root's) and hands each file to its reader's user."""

from __future__ import annotations

import argparse
import json
import os
import secrets
from pathlib import Path

BROKER_UID = 10001  # docker/broker/Dockerfile
GRAFANA_UID = 472  # the grafana/grafana image's user
AGENT_PRINCIPAL = "mesos-agent"


def write(path: Path, text: str, uid: int) -> None:
    """The file with mode 0400, owned by uid (when this runs as root)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".new")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    if os.geteuid() == 0:
        os.chown(temporary, uid, uid)
    os.replace(temporary, path)


def kept(path: Path, uid: int, make: str) -> str:
    """The secret in path, drawn (make) and written first if the file is missing or empty."""
    if path.exists() and path.read_text().strip():
        return path.read_text().strip()
    write(path, make + "\n", uid)
    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--principal", required=True, help="the broker's Mesos principal")
    parser.add_argument("--token-dir", type=Path, required=True)
    parser.add_argument("--broker-mesos-dir", type=Path, required=True)
    parser.add_argument("--master-dir", type=Path, required=True)
    parser.add_argument("--agent-dir", type=Path, required=True)
    parser.add_argument("--grafana-dir", type=Path, required=True)
    args = parser.parse_args()
    kept(args.token_dir / "token", BROKER_UID, secrets.token_urlsafe(32))
    broker = kept(args.broker_mesos_dir / "secret", BROKER_UID, secrets.token_hex(32))
    agent_file = args.agent_dir / "credential.json"
    if agent_file.exists() and agent_file.read_text().strip():
        agent = json.loads(agent_file.read_text())["secret"]
    else:
        agent = secrets.token_hex(32)
        write(agent_file, json.dumps({"principal": AGENT_PRINCIPAL, "secret": agent}), 0)
    agent_entry = {"principal": AGENT_PRINCIPAL, "secret": agent}
    write(args.agent_dir / "http-credentials.json", json.dumps({"credentials": [agent_entry]}), 0)
    credentials = [agent_entry, {"principal": args.principal, "secret": broker}]
    write(args.master_dir / "credentials.json", json.dumps({"credentials": credentials}), 0)
    kept(args.grafana_dir / "admin-password", GRAFANA_UID, secrets.token_urlsafe(24))
    print("secrets ready (docker/README.md says how to read them)")


if __name__ == "__main__":
    main()
