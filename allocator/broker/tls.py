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
    # PEM: the CA that issued `cert`, which clients trust (`tls_ca`); checked at start
    ca: Path | None = None

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
        if self.ca is not None:
            self._check_issued(context)

    def _check_issued(self, server: ssl.SSLContext) -> None:
        """A handshake in memory, as a client trusting only `ca` would make it (host name
        aside): a certificate the clients given `tls_ca` would refuse stops the start."""
        try:
            client = ssl.create_default_context(cafile=str(self.ca))
        except (OSError, ssl.SSLError) as error:
            raise TlsError(f"tls_ca: {self.ca} is not a readable PEM file ({error})") from None
        client.check_hostname = False
        pipes = [ssl.MemoryBIO() for _ in range(4)]
        ends = [
            client.wrap_bio(pipes[0], pipes[1]),
            server.wrap_bio(pipes[1], pipes[0], server_side=True),
        ]
        for _ in range(10):  # a TLS 1.3 handshake takes two round trips
            done = 0
            for end in ends:
                try:
                    end.do_handshake()
                    done += 1
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
                except ssl.SSLCertVerificationError as error:
                    raise TlsError(
                        f"tls: {self.cert} does not verify against tls_ca {self.ca} "
                        f"({error.verify_message}): clients trusting it would refuse the broker"
                    ) from None
            if done == 2:
                return
        raise TlsError(f"tls: no TLS handshake with {self.cert} and tls_ca {self.ca}")

    def grpc_credentials(self):  # -> grpc.ServerCredentials
        import grpc

        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.cert.read_bytes())])

    def uvicorn_options(self) -> dict[str, object]:
        return {
            "ssl_certfile": str(self.cert),
            "ssl_keyfile": str(self.key),
            "ssl_version": ssl.PROTOCOL_TLS_SERVER,
        }
