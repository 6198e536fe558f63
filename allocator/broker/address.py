"""One broker address for every command: `status`, `configure` and `submit` take HOST:PORT,
and either of the broker's tenant API ports works where it can.

The broker serves the same API on HTTP/JSON (default 7080, the Spark plugin's) and gRPC
(default 7081). `status` and `configure` ask /healthz first: an HTTP broker there is used
through its JSON API, anything else is tried as gRPC. `submit` needs the HTTP port (Spark
talks HTTP); given the gRPC port it says so.

A broker serving TLS (`tls_cert`) is reached with `ca_file`: the PEM file of the CA
certificates to trust (and nothing else); the host name is checked against its certificate.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from allocator.broker.ports import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT
from allocator.errors import FairbrokerError

PROBE_SECONDS = 2.0


class BrokerAddressError(FairbrokerError):
    """No broker, or the wrong one of its ports, at an address."""


class BrokerUnavailable(BrokerAddressError):
    """Nothing answers at the address, or a broker that cannot serve now (HTTP 503: a
    standby under --ha, which names the leader)."""


CaFile = str | Path | None


def tls_context(ca_file: CaFile) -> ssl.SSLContext | None:
    """A client context trusting only the CA certificates in `ca_file` (None: plain text)."""
    if ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=str(ca_file))
    except (OSError, ssl.SSLError) as error:
        raise BrokerAddressError(
            f"--ca-file {ca_file}: not a readable PEM file ({error})"
        ) from None


def _scheme(ca_file: CaFile) -> str:
    return "https" if ca_file is not None else "http"


def _http(address: str, method: str, path: str, body: dict | None, token: str | None,
          timeout: float, ca_file: CaFile = None) -> tuple[int, Any]:  # fmt: skip
    data = None if body is None else json.dumps(body).encode()
    url = f"{_scheme(ca_file)}://{address}{path}"
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        context = tls_context(ca_file)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"null")
        except ValueError:
            return error.code, None


def _unverified(error: BaseException, address: str, ca_file: CaFile) -> None:
    """A certificate that does not verify against `ca_file` is said as such, not as
    "no broker here"."""
    reason = getattr(error, "reason", error)
    if isinstance(reason, ssl.SSLCertVerificationError):
        raise BrokerAddressError(
            f"broker at {address}: its certificate does not verify against --ca-file "
            f"{ca_file} ({reason.verify_message})"
        ) from None


def is_http_broker(address: str, ca_file: CaFile = None) -> bool:
    """A fairbroker HTTP API answers /healthz at `address` (healthy or not: a Mesos broker
    that is not subscribed answers 503 with ok false)."""
    try:
        status, body = _http(address, "GET", "/healthz", None, None, PROBE_SECONDS, ca_file)
    except (OSError, ValueError, http.client.HTTPException) as error:  # refused, not HTTP
        _unverified(error, address, ca_file)
        return False
    return status in (200, 503) and isinstance(body, dict) and isinstance(body.get("ok"), bool)


def speaks_tls(address: str) -> bool:
    """Does the port at `address` complete a TLS handshake (certificate not checked: this
    only tells a TLS broker from a plain one, to name the missing --ca-file)?"""
    host, _, port = address.rpartition(":")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    name = host.strip("[]")
    try:
        with (
            socket.create_connection((name, int(port)), PROBE_SECONDS) as raw,
            context.wrap_socket(raw, server_hostname=name),
        ):
            return True
    except (OSError, ValueError):
        return False


def is_metrics_port(address: str, ca_file: CaFile = None) -> bool:
    """The broker's Prometheus exporter answers at `address` (the port users mistake for
    the API's, as it is the third of the three)."""
    url = f"{_scheme(ca_file)}://{address}/metrics"
    try:
        context = tls_context(ca_file)
        with urllib.request.urlopen(url, timeout=PROBE_SECONDS, context=context) as reply:
            head = reply.read(1 << 20)
    except (OSError, ValueError, http.client.HTTPException):
        return False
    return b"fairbroker_" in head


def _not_the_metrics_port(address: str, use: str, ca_file: CaFile = None) -> None:
    if is_metrics_port(address, ca_file):
        raise BrokerAddressError(
            f"--broker {address}: that is the broker's metrics port (Prometheus); {use}"
        )


def is_grpc_broker(address: str, ca_file: CaFile = None) -> bool:
    """A fairbroker gRPC API answers at `address` (even if it then wants a token)."""
    import grpc

    from allocator.broker.client import BrokerCallError, BrokerClient

    with BrokerClient(address, timeout=PROBE_SECONDS, ca_file=ca_file) as client:
        try:
            client.allocation()
        except BrokerCallError as error:
            return error.code not in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "UNIMPLEMENTED")
        except grpc.RpcError:
            return False
    return True


class HttpBrokerClient:
    """`status` and `configure` over the HTTP/JSON API (same messages as gRPC)."""

    def __init__(
        self, address: str, token: str | None, timeout: float = 10.0, ca_file: CaFile = None
    ) -> None:
        self.address, self.token, self.timeout = address, token, timeout
        self.ca_file = ca_file

    def _call(self, name: str, body: dict, reply_type: type) -> Any:
        from google.protobuf import json_format

        try:
            status, data = _http(self.address, "POST", f"/v1/{name}", body, self.token,
                                 self.timeout, self.ca_file)  # fmt: skip
        except (OSError, ValueError, http.client.HTTPException) as error:
            raise BrokerUnavailable(f"broker at {self.address}: {error}") from None
        if status != 200:
            message = data.get("error") if isinstance(data, dict) else None
            error = BrokerUnavailable if status == 503 else BrokerAddressError
            raise error(f"broker at {self.address}: {message or f'HTTP {status}'}")
        return json_format.ParseDict(data, reply_type(), ignore_unknown_fields=True)

    def allocation(self) -> Any:
        from allocator.broker.proto import pb

        return self._call("GetAllocation", {}, pb.Allocation)

    def configure(
        self, scheduler: str = "", mode: str = "", selection: str = "", **changes: Any
    ) -> Any:
        from google.protobuf import json_format

        from allocator.broker.proto import pb

        request = pb.ConfigureRequest(
            scheduler=scheduler, mode=mode, selection=selection, **changes
        )
        return self._call("Configure", json_format.MessageToDict(request), pb.BrokerInfo)

    def explain(self, tenant_id: str) -> Any:
        from allocator.broker.proto import pb

        return self._call("Explain", {"tenantId": tenant_id}, pb.Explanation)

    def __enter__(self) -> HttpBrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


_HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")  # as submit's


def check_host_port(address: str) -> None:
    """`--broker` is HOST:PORT with a port in 1-65535 ([v6]:PORT for an IPv6 address)."""
    match = _HOST_PORT.match(address)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise BrokerAddressError(
            f"--broker: expected HOST:PORT (e.g. 127.0.0.1:{DEFAULT_HTTP_PORT}), got {address!r}"
        )


class LeaderClient:
    """Several broker addresses (`--broker h1:7080,h2:7080`, brokers under --ha): each call
    goes to the addresses in turn until one serves it; a standby or a broker that does not
    answer passes it on. When none serves, the error names every address's answer."""

    def __init__(self, addresses: list[str], token: str | None, ca_file: CaFile = None) -> None:
        self._clients = [api_client(address, token, ca_file) for address in addresses]

    def __getattr__(self, name: str) -> Any:
        from allocator.broker.client import BrokerCallError

        def call(*args: Any, **kwargs: Any) -> Any:
            answers = []
            for client in self._clients:
                try:
                    return getattr(client, name)(*args, **kwargs)
                except BrokerUnavailable as error:
                    answers.append(str(error))
                except BrokerCallError as error:
                    if error.code != "UNAVAILABLE":
                        raise
                    answers.append(str(error))
            raise BrokerUnavailable("no broker serves: " + "; ".join(answers))

        return call

    def __enter__(self) -> LeaderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self._clients:
            client.__exit__(*exc)


def api_client(address: str, token: str | None, ca_file: CaFile = None):
    """A client for `status`/`configure`/`explain`: HTTP if the address is the broker's HTTP
    port, gRPC otherwise (its errors name the address when nothing answers); several
    comma-separated addresses (--ha) give a `LeaderClient` over them. With `ca_file` both
    speak TLS, trusting that CA."""
    if "," in address:
        return LeaderClient([a.strip() for a in address.split(",")], token, ca_file)
    check_host_port(address)
    if is_http_broker(address, ca_file):
        return HttpBrokerClient(address, token, ca_file=ca_file)
    if ca_file is None and speaks_tls(address):
        raise BrokerAddressError(
            f"broker at {address} speaks TLS: give --ca-file (the CA certificate that issued "
            "its certificate; env FAIRBROKER_CA_FILE, or tls_ca in --config)"
        )
    _not_the_metrics_port(
        address, f"use its HTTP ({DEFAULT_HTTP_PORT}) or gRPC ({DEFAULT_GRPC_PORT}) port", ca_file
    )
    from allocator.broker.client import BrokerClient

    return BrokerClient(address, token=token, ca_file=ca_file)


def check_submit_token(address: str, token: str | None, ca_file: CaFile = None) -> None:
    """Ask the broker whether it takes `token` (a read of its allocation), so that a missing
    or wrong token is one line before Spark starts, not a stack trace from the driver."""
    status, _ = _http(address, "GET", "/v1/GetAllocation", None, token, PROBE_SECONDS, ca_file)
    if status == 401:
        how = "a wrong token" if token else "no token (--token or FAIRBROKER_TOKEN)"
        raise BrokerAddressError(f"the broker at {address} refuses {how}")


def check_submit_address(addresses: str | list[str], ca_file: CaFile = None) -> str:
    """`submit` goes to the broker's HTTP port: refuse its gRPC port, or no broker, up front.
    Of several addresses (--ha), the first where a broker answers (leader or standby) is
    returned; if none does, the first one's problem is raised."""
    if isinstance(addresses, list):
        for address in addresses:
            if is_http_broker(address, ca_file):
                return address
        address = addresses[0]
    else:
        address = addresses
    if is_http_broker(address, ca_file):
        return address
    if ca_file is None and speaks_tls(address):
        raise BrokerAddressError(
            f"--broker {address} speaks TLS: give --ca-file (the CA certificate that issued "
            "its certificate; env FAIRBROKER_CA_FILE)"
        )
    _not_the_metrics_port(
        address, f"submit uses its HTTP port (default {DEFAULT_HTTP_PORT})", ca_file
    )
    if is_grpc_broker(address, ca_file):
        raise BrokerAddressError(
            f"--broker {address}: that is the broker's gRPC port; submit uses its HTTP port "
            f"(default {DEFAULT_HTTP_PORT}; gRPC is {DEFAULT_GRPC_PORT})"
        )
    raise BrokerAddressError(
        f"--broker {address}: no broker answers there (start one with `fairbroker serve`; "
        f"--dry-run prints the command without one)"
    )
