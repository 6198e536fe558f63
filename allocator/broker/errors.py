"""The tenant API's error: a gRPC status name (mapped to HTTP too) and a one-line message."""

from __future__ import annotations

from allocator.errors import FairbrokerError


class ApiError(FairbrokerError):
    """A request the broker refuses; `code` names a gRPC status (mapped to HTTP too)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def invalid(message: str) -> ApiError:
    return ApiError("INVALID_ARGUMENT", message)


def unavailable(error: Exception) -> ApiError:
    """The state file could not record a change (nothing changed); retry later."""
    return ApiError("UNAVAILABLE", f"not recorded, nothing changed: {error}")
