"""TLS on the tenant API (HTTP and gRPC) and /metrics (issue 25): a CA and a server
certificate for 127.0.0.1 made in the test with `cryptography`, a real broker on loopback,
clients that trust that CA (and ones that do not, or speak plain text)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from support.pki import make_ca, make_server_cert

from allocator.backends.base import AgentInfo
from allocator.broker.proto import pb, pb_grpc
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.broker.tls import TlsError, TlsFiles
from allocator.cli.serve_config import ConfigError, load_serve_config

TOKEN = "s3cret"
AGENTS = [AgentInfo("a1", "127.0.0.1", {"cpus": 4, "mem": 4096})]


@pytest.fixture
def pki(tmp_path: Path) -> tuple[Path, TlsFiles, Path]:
    """(the CA's certificate, the server's files signed by it, another CA's certificate)."""
    ca, ca_key, ca_name = make_ca(tmp_path, "test-ca")
    other, _, _ = make_ca(tmp_path, "other-ca")
    return ca, make_server_cert(tmp_path, ca_key, ca_name), other


def _get(url: str, context: ssl.SSLContext | None, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=10, context=context) as answer:
        return answer.status, answer.read()


def test_tenant_api_grpc_and_metrics_over_tls(tmp_path: Path, pki) -> None:
    ca, files, other = pki
    options = BrokerOptions(
        http_port=0, grpc_port=0, metrics_port=0, token=TOKEN, metrics_token=True,
        state_dir=tmp_path / "state", agents=AGENTS, tls=files,
    )  # fmt: skip
    trusting = ssl.create_default_context(cafile=str(ca))
    with BrokerService(options) as service:
        http, metrics = service.http_address, service.metrics_address
        # HTTPS, trusting the CA: the tenant API answers, the host name (an IP SAN) checked
        status, body = _get(f"https://{http}/healthz", trusting)
        assert (status, json.loads(body)) == (200, {"ok": True})
        status, body = _get(f"https://{http}/v1/GetAllocation", trusting, TOKEN)
        assert status == 200 and "agents" in json.loads(body)
        status, body = _get(f"https://{metrics}/metrics", trusting, TOKEN)
        assert status == 200 and b"fairbroker_" in body
        # a client that trusts another CA, or the system's, refuses the certificate
        for context in (ssl.create_default_context(cafile=str(other)), None):
            with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
                _get(f"https://{http}/healthz", context)
            with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
                _get(f"https://{metrics}/metrics", context, TOKEN)
        # plain HTTP on the TLS port gets no answer from the API
        for address in (http, metrics):
            with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
                _get(f"http://{address}/healthz", None)
        # gRPC over TLS with the CA as root; the token still required
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
        with grpc.secure_channel(service.grpc_address, credentials) as channel:
            stub = pb_grpc.TenantServiceStub(channel)
            reply = stub.GetAllocation(
                pb.AllocationRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),),
                timeout=10,
            )  # fmt: skip
            assert [a.name for a in reply.agents] == ["a1"]
            with pytest.raises(grpc.RpcError) as denied:
                stub.GetAllocation(pb.AllocationRequest(), timeout=10)
            assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # a plain-text channel, or one trusting another CA, does not get through
        wrong = grpc.ssl_channel_credentials(root_certificates=other.read_bytes())
        for channel in (
            grpc.insecure_channel(service.grpc_address),
            grpc.secure_channel(service.grpc_address, wrong),
        ):
            with channel, pytest.raises(grpc.RpcError) as failed:
                pb_grpc.TenantServiceStub(channel).GetAllocation(
                    pb.AllocationRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),),
                    timeout=5,
                )  # fmt: skip
            assert failed.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_key_that_is_not_the_certificates_stops_the_start(tmp_path: Path, pki) -> None:
    _, files, _ = pki
    wrong = TlsFiles(files.cert, tmp_path / "other.key")
    wrong.key.write_text("not a key\n")
    options = BrokerOptions(
        http_port=0, grpc_port=0, state_dir=tmp_path / "state", agents=AGENTS, tls=wrong
    )
    with pytest.raises(TlsError, match="not a PEM certificate and its key"):
        BrokerService(options)
    missing = TlsFiles(tmp_path / "nope.crt", files.key)
    with pytest.raises(TlsError, match=r"cannot read .*nope\.crt \(No such file"):
        missing.check()


def test_serve_config_takes_both_files_or_neither() -> None:
    with pytest.raises(
        ConfigError, match=r"tls_cert \(from --tls-cert\): tls_cert and tls_key go together"
    ):
        load_serve_config({"tls_cert": "/srv/tls.crt"}, None, {})
    config, _ = load_serve_config({"tls_cert": "/srv/a.crt", "tls_key": "/srv/a.key"}, None, {})
    assert config.tls_files() == TlsFiles(Path("/srv/a.crt"), Path("/srv/a.key"))
    assert Path("/srv/a.key") in config.sandbox_config().hide
