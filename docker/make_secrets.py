"""The compose cluster's secrets, drawn on its first start and kept after (compose.yaml's
one-shot `secrets` service; nothing secret is in compose.yaml or .env).

Each secret goes to its own volume, so that a service mounts only what it needs: the tenant
token (broker and Spark drivers), the broker's Mesos secret (broker and the quota job), the
masters' credentials (every principal), the agents' credential (the agents), Grafana's admin
password (Grafana), and the broker's TLS certificate: a CA made for this cluster signs a
certificate for the brokers' names (`--tls-name`, plus localhost and 127.0.0.1 for the
healthcheck); the brokers get the certificate, its key and the CA's certificate, the clients
(drivers, Prometheus) the CA's certificate alone, and the CA's key is thrown away once it has
signed. A file that exists is kept; the masters' credentials and the clients' copy of the CA
are rewritten on every start, so they always match. Standard library but for the TLS part
(`cryptography`, in the broker image): it runs in the broker image as root (a fresh volume is
root's) and hands each file to its reader's user."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import secrets
from pathlib import Path

BROKER_UID = 10001  # docker/broker/Dockerfile
GRAFANA_UID = 472  # the grafana/grafana image's user
AGENT_PRINCIPAL = "mesos-agent"


TLS_DAYS = 825  # the longest validity clients accept for a server certificate


def write(path: Path, text: str, uid: int, mode: int = 0o400) -> None:
    """The file with `mode` (0400: its reader's alone), owned by uid (when run as root)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".new")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
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


def tls(tls_dir: Path, ca_dir: Path, names: list[str]) -> None:
    """tls.crt, tls.key and ca.crt in tls_dir (the brokers'), ca.crt in ca_dir (clients');
    all three drawn anew when any is missing."""
    files = [tls_dir / name for name in ("tls.crt", "tls.key", "ca.crt")]
    if not all(f.exists() and f.read_text().strip() for f in files):
        cert, key, ca = _issue(names)
        write(files[0], cert, BROKER_UID, 0o444)
        write(files[1], key, BROKER_UID)
        write(files[2], ca, BROKER_UID, 0o444)
    write(ca_dir / "ca.crt", files[2].read_text(), 0, 0o444)


def _issue(names: list[str]) -> tuple[str, str, str]:
    """(server certificate, its key, the CA's certificate), PEM; the CA's key is not kept."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fairbroker compose CA")])
    usage = {k: False for k in (
        "digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
        "key_agreement", "key_cert_sign", "crl_sign", "encipher_only", "decipher_only",
    )}  # fmt: skip
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=TLS_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(**{**usage, "key_cert_sign": True, "crl_sign": True}), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in [*names, "localhost"]]
    alt.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=TLS_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(**{**usage, "digital_signature": True}), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(pem).decode(), key_pem.decode(), ca.public_bytes(pem).decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--principal", required=True, help="the broker's Mesos principal")
    parser.add_argument("--token-dir", type=Path, required=True)
    parser.add_argument("--broker-mesos-dir", type=Path, required=True)
    parser.add_argument("--master-dir", type=Path, required=True)
    parser.add_argument("--agent-dir", type=Path, required=True)
    parser.add_argument("--grafana-dir", type=Path, required=True)
    parser.add_argument("--tls-dir", type=Path, required=True, help="the brokers' TLS files")
    parser.add_argument("--ca-dir", type=Path, required=True, help="the clients' CA copy")
    parser.add_argument(
        "--tls-name", action="append", required=True, help="a name the brokers answer to"
    )
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
    tls(args.tls_dir, args.ca_dir, args.tls_name)
    print("secrets ready (docker/README.md says how to read them)")


if __name__ == "__main__":
    main()
