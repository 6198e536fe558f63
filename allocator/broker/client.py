"""A Python client for the tenant API (gRPC)."""

from __future__ import annotations

from pathlib import Path

import grpc

from allocator.broker.proto import pb, pb_grpc
from allocator.errors import FairbrokerError


class BrokerCallError(FairbrokerError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class BrokerClient:
    """`BrokerClient("127.0.0.1:7081", token=...)`; every call raises BrokerCallError. With
    `ca_file` (PEM) it speaks TLS to the broker, trusting only those CA certificates."""

    def __init__(
        self,
        target: str,
        token: str | None = None,
        timeout: float = 10.0,
        ca_file: str | Path | None = None,
    ) -> None:
        self.target = target
        if ca_file is None:
            self._channel = grpc.insecure_channel(target)
        else:
            try:
                roots = Path(ca_file).read_bytes()
            except OSError as error:
                raise BrokerCallError(
                    "INVALID_ARGUMENT", f"--ca-file {ca_file}: {error.strerror}"
                ) from None
            credentials = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channel = grpc.secure_channel(target, credentials)
        self._stub = pb_grpc.TenantServiceStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout

    def _call(self, name: str, request):
        try:
            return getattr(self._stub, name)(request, metadata=self._metadata, timeout=self.timeout)
        except grpc.RpcError as error:
            code = error.code().name if error.code() else "UNKNOWN"
            details = error.details() or ""
            if code == "UNAVAILABLE" and details.startswith(("standby", "taking over")):
                # --ha: a standby answered, naming the leader
                raise BrokerCallError(code, f"broker at {self.target}: {details}") from None
            if code == "UNAVAILABLE":
                raise BrokerCallError(code, f"broker at {self.target} is not reachable") from None
            raise BrokerCallError(code, error.details() or code) from None

    def register(self, request: pb.RegisterRequest) -> pb.RegisterReply:
        return self._call("Register", request)

    def heartbeat(self, tenant_id: str) -> list[str]:
        """Keeps the lease; returns the tenant's executors being reclaimed (to decommission)."""
        return list(self._call("Heartbeat", pb.TenantRef(tenant_id=tenant_id)).leaving)

    def set_target(self, tenant_id: str, total: int) -> None:
        self._call("SetTarget", pb.SetTargetRequest(tenant_id=tenant_id, total=total))

    def kill(self, tenant_id: str, executor_ids: list[str]) -> list[str]:
        reply = self._call(
            "KillExecutors", pb.KillRequest(tenant_id=tenant_id, executor_ids=executor_ids)
        )
        return list(reply.killed)

    def unregister(self, tenant_id: str) -> None:
        self._call("Unregister", pb.TenantRef(tenant_id=tenant_id))

    def allocation(self) -> pb.Allocation:
        return self._call("GetAllocation", pb.AllocationRequest())

    def explain(self, tenant_id: str) -> pb.Explanation:
        return self._call("Explain", pb.TenantRef(tenant_id=tenant_id))

    def configure(
        self,
        scheduler: str = "",
        mode: str = "",
        selection: str = "",
        **changes: object,
    ) -> pb.BrokerInfo:
        """Change the engine's configuration at run time (level, trigger, ties, role_weights
        as keywords); empty values keep the broker's."""
        request = pb.ConfigureRequest(
            scheduler=scheduler, mode=mode, selection=selection, **changes
        )
        return self._call("Configure", request)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
