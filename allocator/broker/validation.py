"""Every check on what a tenant sends, in one place, as pure functions of the request and the
operator's `Limits`. Each refusal is an INVALID_ARGUMENT naming the field and the limit."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from allocator.backends.executor import EnvironmentRefused, check_environment
from allocator.broker.errors import invalid
from allocator.broker.limits import GROUP, Limits
from allocator.broker.proto import pb
from allocator.engine_config import EngineConfig
from allocator.errors import FairbrokerError

# fullmatch only: `re.match` with `$` lets a trailing newline through.
TENANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
ATTRIBUTE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ATTRIBUTE_VALUE = re.compile(r"[A-Za-z0-9._:/-]{1,128}")
DRIVER_URL = re.compile(r"spark://[A-Za-z0-9_]{1,64}@[A-Za-z0-9.\[\]:-]{1,255}:[0-9]{1,5}")
APP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
MAX_TARGET = 2**31 - 1
MAX_RESOURCE_PROFILE = 1 << 20

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """`text` with control characters escaped, for logs (a newline cannot forge a line)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


@dataclass(frozen=True)
class Registration:
    """A Register request that passed every check, with its demand vector."""

    request: pb.RegisterRequest
    demand: dict[str, float]
    group: str  # "*" when none
    weight: float  # 1 when none


def check_tenant_id(tenant_id: str, field: str = "tenant_id") -> str:
    if not TENANT_ID.fullmatch(tenant_id):
        raise invalid(
            f"{field}: 1-128 characters of letters, digits and . _ : - starting with a letter "
            f"or digit, got {printable(repr(tenant_id[:140]))}"
        )
    return tenant_id


def check_target(total: int, field: str = "target") -> int:
    if not 0 <= total <= MAX_TARGET:
        raise invalid(f"{field}: must be in [0, {MAX_TARGET}], got {total}")
    return total


def check_kill(request: pb.KillRequest, limits: Limits) -> list[str]:
    check_tenant_id(request.tenant_id)
    ids = list(request.executor_ids)
    if len(ids) > limits.max_kill_ids:
        raise invalid(f"executor_ids: at most {limits.max_kill_ids}, got {len(ids)}")
    if any(len(executor_id) > 64 for executor_id in ids):
        raise invalid("executor_ids: an id of more than 64 characters")
    return ids


def check_demand(
    demand: Mapping[str, float], resources: Collection[str], limits: Limits
) -> dict[str, float]:
    demand = dict(demand)
    if not demand:
        raise invalid("demand: the per-executor resources are required (cpus and mem)")
    for name, value in demand.items():
        if name not in resources:
            raise invalid(
                f"demand.{printable(name[:64])}: unknown resource "
                f"(this cluster has {', '.join(resources)})"
            )
        if not math.isfinite(value) or value < 0:
            raise invalid(f"demand.{name}: must be a finite non-negative number, got {value}")
    if demand.get("cpus", 0) <= 0 or demand.get("mem", 0) <= 0:
        raise invalid("demand: an executor needs positive cpus and mem")
    for name, minimum in limits.min_demand.items():
        if 0 < demand.get(name, 0) < minimum:
            raise invalid(f"demand.{name}: below the minimum of {minimum:g}, got {demand[name]:g}")
    return demand


def check_constraints(constraints: Mapping[str, str], limits: Limits) -> None:
    if len(constraints) > limits.max_constraints:
        raise invalid(f"constraints: at most {limits.max_constraints}, got {len(constraints)}")
    for name, value in constraints.items():
        if not ATTRIBUTE.fullmatch(name):
            raise invalid(f"constraints: not an attribute name: {printable(repr(name[:70]))}")
        if not ATTRIBUTE_VALUE.fullmatch(value):
            raise invalid(
                f"constraints.{name}: 1-128 characters of letters, digits and . _ : / -, "
                f"got {printable(repr(value[:140]))}"
            )


def check_launch(launch: pb.ExecutorLaunch, demand: Mapping[str, float], limits: Limits) -> None:
    if not DRIVER_URL.fullmatch(launch.driver_url):
        raise invalid(
            "launch.driver_url: expected spark://NAME@HOST:PORT, "
            f"got {printable(repr(launch.driver_url[:300]))}"
        )
    if not APP_ID.fullmatch(launch.app_id):
        raise invalid(
            "launch.app_id: 1-128 characters of letters, digits and . _ : - starting with a "
            f"letter or digit, got {printable(repr(launch.app_id[:140]))}"
        )
    if launch.cores != demand["cpus"]:
        raise invalid(
            f"launch.cores: must equal demand.cpus ({demand['cpus']:g}): the executor runs "
            f"as many tasks as the cpus it is accounted, got {launch.cores}"
        )
    if not 0 < launch.heap_mib <= demand["mem"]:
        raise invalid(
            f"launch.heap_mib: must be positive and within demand.mem ({demand['mem']:g} "
            f"MiB), got {launch.heap_mib}"
        )
    if not 0 <= launch.resource_profile_id <= MAX_RESOURCE_PROFILE:
        raise invalid(
            f"launch.resource_profile_id: must be in [0, {MAX_RESOURCE_PROFILE}], "
            f"got {launch.resource_profile_id}"
        )
    environment = launch.environment
    if len(environment) > limits.max_env_vars:
        raise invalid(
            f"launch.environment: at most {limits.max_env_vars} variables, got {len(environment)}"
        )
    size = sum(len(k) + len(v) for k, v in environment.items())
    if size > limits.max_env_bytes:
        raise invalid(
            f"launch.environment: at most {limits.max_env_bytes} characters in all, got {size}"
        )
    try:
        check_environment(environment, limits.executor_env)
    except EnvironmentRefused as error:
        raise invalid(printable(str(error))) from None


def check_register(
    request: pb.RegisterRequest, resources: Collection[str], limits: Limits
) -> Registration:
    """Everything about one Register request that does not depend on other tenants."""
    check_tenant_id(request.tenant_id)
    group = request.group or "*"
    if group != "*" and not GROUP.fullmatch(group):
        raise invalid(
            "group: 1-64 characters of letters, digits and . _ - starting with a letter or "
            f"digit, got {printable(repr(request.group[:80]))}"
        )
    weight = request.weight or 1.0
    if not (math.isfinite(weight) and limits.min_weight <= weight <= limits.max_weight):
        raise invalid(
            f"weight: must be in [{limits.min_weight:g}, {limits.max_weight:g}], "
            f"got {request.weight:g}"
        )
    check_target(request.target)
    demand = check_demand(request.demand, resources, limits)
    check_constraints(request.constraints, limits)
    check_launch(request.launch, demand, limits)
    return Registration(request, demand, group, weight)


def check_room(
    registration: Registration, tenants: int, groups: Collection[str], limits: Limits
) -> None:
    """A new tenant fits within the broker's tenant and group counts."""
    if tenants >= limits.max_tenants:
        raise invalid(f"tenant_id: the broker holds its limit of {limits.max_tenants} tenants")
    if registration.group not in groups and len(groups) >= limits.max_groups:
        raise invalid(f"group: the broker holds its limit of {limits.max_groups} groups")


def same_registration(a: pb.RegisterRequest, b: pb.RegisterRequest) -> bool:
    """Identical but for the target (which a re-register may change)."""
    first, second = pb.RegisterRequest(), pb.RegisterRequest()
    first.CopyFrom(a)
    second.CopyFrom(b)
    first.target = second.target = 0
    return first.SerializeToString(deterministic=True) == second.SerializeToString(
        deterministic=True
    )


#: ConfigureRequest's reclaim numbers, each an EngineConfig field of the same name.
RECLAIM_NUMBERS = (
    "reclaim_after", "reclaim_grace", "reclaim_min_runtime", "reclaim_per_run",
    "reclaim_per_minute",
)  # fmt: skip


def configured(config: EngineConfig, request: pb.ConfigureRequest, limits: Limits) -> EngineConfig:
    """`config` with a Configure request's changes (an empty field keeps its value); the
    engine's own checks run when it is built."""
    changes: dict[str, object] = {
        name: value
        for name in ("scheduler", "mode", "level", "trigger", "ties")
        if (value := getattr(request, name))
    }
    if request.scheduler or request.selection:
        changes["selection"] = request.selection or None
    if request.role_weights:
        weights = {**config.role_weights, **request.role_weights}
        if len(weights) > limits.max_groups:
            raise invalid(f"role_weights: at most {limits.max_groups} groups")
        if not all(r == "*" or GROUP.fullmatch(r) for r in request.role_weights):
            raise invalid("role_weights: a group name must be a valid group")
        changes["role_weights"] = weights
    for name in RECLAIM_NUMBERS:
        if request.HasField(name):
            changes[name] = getattr(request, name)
    if request.HasField("protected_groups"):
        groups = list(request.protected_groups.groups)
        if len(groups) > limits.max_groups:
            raise invalid(f"protected_groups: at most {limits.max_groups} groups")
        if not all(g == "*" or GROUP.fullmatch(g) for g in groups):
            raise invalid("protected_groups: a group name must be a valid group")
        changes["protected_groups"] = tuple(groups)
    try:
        return config.replace(**changes)
    except (KeyError, ValueError, FairbrokerError) as error:
        raise invalid(str(error).strip("'\"")) from None
