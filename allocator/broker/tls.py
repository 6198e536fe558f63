"""TLS for the tenant API (HTTP and gRPC) and /metrics: one certificate and key, in PEM files
named in the serve configuration (`tls_cert`, `tls_key`; docs/security.md)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from allocator.errors import FairbrokerError


class TlsError(FairbrokerError):
    """The certificate or key cannot be used; the message names the file."""


@dataclass(frozen=True)
class TlsFiles:
    cert: Path  # PEM: the server certificate, then any intermediates
    key: Path  # PEM: its private key (unencrypted)

    def check(self) -> None:
        """Load both once, so a bad file stops the start with one line, not a thread."""
        for path in (self.cert, self.key):
            try:
                path.read_bytes()
            except OSError as error:
                raise TlsError(f"tls: cannot read {path} ({error.strerror})") from None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as error:
            raise TlsError(
                f"tls: {self.cert} and {self.key} are not a PEM certificate and its key ({error})"
            ) from None

    def grpc_credentials(self):  # -> grpc.ServerCredentials
        import grpc

        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.cert.read_bytes())])

    def uvicorn_options(self) -> dict[str, object]:
        return {
            "ssl_certfile": str(self.cert),
            "ssl_keyfile": str(self.key),
            "ssl_version": ssl.PROTOCOL_TLS_SERVER,
        }
