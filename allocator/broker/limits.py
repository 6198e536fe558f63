"""What the operator allows a tenant: one configuration object, checked at every request."""

from __future__ import annotations

from dataclasses import dataclass, field

from allocator.backends.executor import ExecutorEnvPolicy


@dataclass(frozen=True)
class Limits:
    executor_env: ExecutorEnvPolicy = field(default_factory=ExecutorEnvPolicy)
