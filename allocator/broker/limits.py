"""What the operator allows a tenant: one configuration object, checked at every request
(`allocator.broker.validation`) and by the allocation loop (caps on launches)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from allocator.backends.executor import ExecutorEnvPolicy
from allocator.errors import did_you_mean

# fullmatch only: `re.match` with `$` lets a trailing newline through.
GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a Mesos role name; no '@', no '/'
DEFAULT_MIN_DEMAND = MappingProxyType({"cpus": 0.1, "mem": 32.0})  # MiB


@dataclass(frozen=True)
class Limits:
    executor_env: ExecutorEnvPolicy = field(default_factory=ExecutorEnvPolicy)
    # per executor and resource
    min_demand: Mapping[str, float] = field(default_factory=lambda: DEFAULT_MIN_DEMAND)
    max_executors_per_tenant: int = 1000  # a higher target is held at this
    max_launches_per_run: int = 32  # the rest wait for the next run (keeps a run short)
    min_weight: float = 0.001  # weights are in [min_weight, max_weight]: a criterion
    max_weight: float = 1000.0  # divides by them, and 1e-320 would overflow it
    max_tenants: int = 2000
    max_groups: int = 200
    max_constraints: int = 16
    max_env_vars: int = 64
    max_env_bytes: int = 64 << 10  # names and values of one tenant's executor environment
    max_kill_ids: int = 1000  # executor ids in one KillExecutors

    def with_settings(self, settings: Iterable[str]) -> Limits:
        """`NAME=VALUE` settings (`fairbroker serve --limit`), e.g. `max_tenants=500` or
        `min_demand.cpus=0.5`; raises ValueError naming the setting."""
        changes: dict[str, object] = {}
        min_demand = dict(self.min_demand)
        numbers = {
            f.name: f.type for f in dataclasses.fields(self) if f.type in ("int", "float")
        }
        for setting in settings:
            name, sep, raw = setting.partition("=")
            name = name.strip()
            try:
                value = float(raw) if sep else None
            except ValueError:
                value = None
            if value is None or not value >= 0 or value == float("inf"):
                raise ValueError(f"{setting!r}: expected NAME=NUMBER (a finite number >= 0)")
            if name.startswith("max_") and value < 1:
                # 0 would stop what it bounds for good (max_launches_per_run=0: a broker
                # that loops without ever launching)
                raise ValueError(f"{name}: at least 1, got {raw.strip()}")
            if name.startswith("min_demand."):
                min_demand[name.removeprefix("min_demand.")] = value
            elif name in numbers:
                if numbers[name] == "int" and value != int(value):
                    raise ValueError(f"{name}: a whole number, got {raw}")
                changes[name] = int(value) if numbers[name] == "int" else value
            else:
                known = [*numbers, "min_demand.RESOURCE"]
                raise ValueError(
                    f"{name!r}: unknown limit{did_you_mean(name, known)} "
                    f"(limits: {', '.join(known)})"
                )
        limits = dataclasses.replace(self, min_demand=MappingProxyType(min_demand), **changes)
        if not 0 < limits.min_weight <= limits.max_weight:
            raise ValueError(
                f"min_weight: must be in (0, max_weight {limits.max_weight:g}], "
                f"got {limits.min_weight:g}"
            )
        return limits
