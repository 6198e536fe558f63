"""One validated configuration of the online engine, passed whole, and the one place each
engine setting and its default are written.

Every command that runs the engine (`fill`, `sim`, `whatif`, `serve`, `batch`), both
simulators and the broker build an `EngineConfig` once and hand it on; nothing below them
takes the options one by one. The command-line options (`allocator/cli/engine_options.py`)
and `serve`'s configuration keys and FAIRBROKER_* variables (`allocator/cli/serve_config.py`)
are derived from the fields below and their `Setting` metadata, so a new field is a new
option everywhere. The defaults are Mesos's (`EngineConfig.mesos()`): role-level fairness,
an allocation run every second, freed resources waiting for it, and a 5 s refuse filter on
declined resources.

The module imports no numerical library (the command line reads it for --help): the enum
types of the fields are imported when a configuration is first validated.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from allocator.errors import FairbrokerError
from allocator.mesos_defaults import ALLOCATION_INTERVAL_SECONDS, REFUSE_SECONDS

if TYPE_CHECKING:
    from allocator.policy import Selection, Ties
    from allocator.policy.levels import Level
    from allocator.reclaim import ReclaimLimits
    from allocator.state import Mode

#: Role (group) weights are bounded like tenant weights (allocator.broker.limits).
MAX_ROLE_WEIGHT = 1000.0
#: An allocation run every hour at most. A run also expires leases (30 s by default), forgets
#: executors that never reported their exit (60 s) and ends rests (60-900 s), so a longer
#: interval only delays those; and the broker's loop waits on a timer that overflows past
#: threading.TIMEOUT_MAX (~292 years: `--interval 1e10` killed the loop thread).
MAX_INTERVAL_SECONDS = 3600.0
#: The reclaim knobs (issue 22, docs/reclaim.md), left out of `to_json` while reclaim is off.
RECLAIM_FIELDS = (
    "reclaim_after",
    "reclaim_grace",
    "reclaim_min_runtime",
    "reclaim_per_run",
    "reclaim_per_minute",
    "protected_groups",
)


class Trigger(StrEnum):
    """tick: freed resources wait for the next periodic run (Mesos). release: run at once."""

    TICK = "tick"
    RELEASE = "release"


class EngineConfigError(FairbrokerError):
    """An engine option out of range or unknown; the message names the option."""


@dataclass(frozen=True)
class Setting:
    """What the command line and serve's configuration need to know about a field beyond its
    name, type and default."""

    help: str = ""
    #: "module:name" of its values (an enum, or a mapping's keys), imported on first use
    choices: str | None = None
    #: numbers: the smallest value allowed, and whether that value itself is excluded
    minimum: float | None = None
    exclusive: bool = False
    #: only where there is a clock and roles (an online engine, not a static fill)
    online: bool = False
    #: command-line spelling when not --<name with dashes>, and a one-letter alias
    flag: str | None = None
    short: str | None = None
    metavar: str | None = None
    #: `fairbroker serve`'s default where a long-running broker wants another one
    serve_default: Any = None

    def values(self) -> Any:
        module, _, name = (self.choices or "").partition(":")
        return getattr(importlib.import_module(module), name)


def setting(**options: Any) -> dict[str, Setting]:
    """A field's metadata: `field(default=..., metadata=setting(help=..., ...))`."""
    return {"setting": Setting(**options)}


def setting_of(item: Field) -> Setting:
    return item.metadata.get("setting", Setting())


def default_of(item: Field) -> Any:
    """A field's default (None when it has none)."""
    if item.default is not MISSING:
        return item.default
    return item.default_factory() if item.default_factory is not MISSING else None


def parse_role_weights(items: Iterable[str]) -> dict[str, float]:
    """GROUP=WEIGHT strings (--role-weight flags, FAIRBROKER_ROLE_WEIGHTS=a=2,b=1) as a
    mapping; the weights themselves are checked by EngineConfig."""
    weights: dict[str, float] = {}
    for item in items:
        name, sep, weight = str(item).partition("=")
        if not sep or not name.strip():
            raise EngineConfigError(f"role_weights: expected GROUP=WEIGHT, got {item!r}")
        try:
            weights[name.strip()] = float(weight)
        except ValueError:
            raise EngineConfigError(
                f"role_weights: {name.strip()}: weight must be a number, got {weight!r}"
            ) from None
    return weights


def _enum(kind: type[StrEnum], value: object, name: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise EngineConfigError(f"{name}: unknown {value!r} (one of {choices})") from None


def _check_number(name: str, spec: Setting, value: Any, integer: bool) -> None:
    low, exclusive = spec.minimum, spec.exclusive
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if integer and not isinstance(value, int):
        is_number = False
    in_range = is_number and math.isfinite(value) and (value > low if exclusive else value >= low)
    if in_range:
        return
    op = ">" if exclusive else ">="
    if integer:
        kind = f"an integer {op} {low:g}"
        if (low, exclusive) == (0, False):
            kind = "a non-negative integer"
        raise EngineConfigError(f"{name}: must be {kind}, got {value!r}")
    raise EngineConfigError(f"{name}: must be finite and {op} {low:g}, got {value}")


@dataclass(frozen=True)
class EngineConfig:
    """What the engine decides with. Strings are accepted for the enum fields and
    converted; every field is checked once, here."""

    scheduler: str = field(
        default="rpsdsf",
        metadata=setting(
            help="Fairness criterion.", choices="allocator.policy:SCHEDULERS", short="-s"
        ),
    )
    mode: Mode = field(
        default="characterized",
        metadata=setting(
            choices="allocator.state:Mode",
            help="characterized: tenants declare their executor size; oblivious: a tenant is "
            "offered an agent's whole remainder.",
        ),
    )
    selection: Selection | None = field(
        default=None,  # None: the scheduler's own default
        metadata=setting(
            choices="allocator.policy:Selection",
            help="Server selection (default: the scheduler's own; firstfit with drf is "
            "First-Fit DRFH).",
        ),
    )
    level: Level = field(
        default="role",
        metadata=setting(
            choices="allocator.policy.levels:Level",
            online=True,
            help="role: groups first, then frameworks within (Mesos); framework: flat.",
        ),
    )
    trigger: Trigger = field(
        default="tick",
        metadata=setting(
            choices="allocator.engine_config:Trigger",
            online=True,
            help="tick: freed resources wait for the next allocation run (Mesos); release: "
            "at once.",
        ),
    )
    ties: Ties = field(
        default="random",
        metadata=setting(
            choices="allocator.policy:Ties",
            help="Tie rule among equally fair choices (waste: the agent left least unusable).",
        ),
    )
    seed: int = field(
        default=0, metadata=setting(minimum=0, help="Seed of the allocator's random choices.")
    )
    refuse_seconds: float = field(
        default=REFUSE_SECONDS,
        metadata=setting(
            minimum=0,
            online=True,
            help="How long declined resources stay hidden from the tenant (Mesos: 5).",
        ),
    )
    interval: float = field(
        default=ALLOCATION_INTERVAL_SECONDS,
        metadata=setting(
            minimum=0,
            exclusive=True,
            online=True,
            help="Seconds between allocation runs (Mesos: 1).",
        ),
    )
    role_weights: Mapping[str, float] = field(
        default_factory=dict,
        metadata=setting(
            online=True,
            flag="--role-weight",
            metavar="GROUP=WEIGHT",
            help="Weight of a group (role) in two-level fairness (repeat; default 1; a batch "
            "file's group weights are the defaults).",
        ),
    )
    fuga_k: int = field(
        default=3,
        metadata=setting(
            help="FUGA: strategies per agent, its K best executor combinations (default 3)."
        ),
    )
    fuga_lambda: float = field(
        default=1.0,
        metadata=setting(
            help="FUGA: weight of the deviation from equal dominant shares against "
            "skewness (default 1).",
        ),
    )

    reclaim_after: float = field(
        default=0.0,
        metadata=setting(
            minimum=0,
            online=True,
            metavar="SECONDS",
            serve_default=30.0,
            help="Reclaim executors from tenants above their fair share for a tenant that has "
            "waited below its own this long (0: never; the engine's default, so the papers' "
            "experiments replay unchanged; serve's default is 30, docs/reclaim.md).",
        ),
    )
    reclaim_grace: float = field(
        default=30.0,
        metadata=setting(
            minimum=0,
            online=True,
            metavar="SECONDS",
            help="How long a reclaimed executor may take to leave (Spark decommissioning) "
            "before it is killed.",
        ),
    )
    reclaim_min_runtime: float = field(
        default=5.0,
        metadata=setting(
            minimum=0,
            online=True,
            metavar="SECONDS",
            help="An executor younger than this is never reclaimed.",
        ),
    )
    reclaim_per_run: int = field(
        default=10,
        metadata=setting(minimum=0, online=True, help="Executors reclaimed per run at most."),
    )
    reclaim_per_minute: int = field(
        default=60,
        metadata=setting(minimum=0, online=True, help="Executors reclaimed in any minute at most."),
    )
    protected_groups: tuple[str, ...] = field(
        default=(),
        metadata=setting(
            online=True,
            flag="--protected-group",
            metavar="GROUP",
            help="A group (role) whose executors are never reclaimed (repeat; a group's "
            "`preemptible: false`).",
        ),
    )

    def __post_init__(self) -> None:
        from allocator.policy import scheduler

        set_ = object.__setattr__  # frozen: normalise in place once
        set_(self, "scheduler", scheduler(self.scheduler).name)  # did-you-mean on a typo
        for item in fields(self):
            spec, value = setting_of(item), getattr(self, item.name)
            if value is None and item.default is None:
                continue
            if spec.choices and isinstance(kind := spec.values(), type):  # an enum
                set_(self, item.name, _enum(kind, value, item.name))
            elif spec.minimum is not None:
                _check_number(item.name, spec, value, integer=type(item.default) is int)
        if not self.interval <= MAX_INTERVAL_SECONDS:
            raise EngineConfigError(
                f"interval: must be in (0, {MAX_INTERVAL_SECONDS:g}] seconds, got {self.interval:g}"
            )
        weights = dict(self.role_weights)
        for role, weight in weights.items():
            if not isinstance(role, str) or not role:
                raise EngineConfigError("role_weights: a role name must be a non-empty string")
            if not (math.isfinite(weight) and 0 < weight <= MAX_ROLE_WEIGHT):
                raise EngineConfigError(
                    f"role_weights: {role}: must be in (0, {MAX_ROLE_WEIGHT:g}], got {weight}"
                )
        set_(self, "role_weights", MappingProxyType({r: float(w) for r, w in weights.items()}))
        if isinstance(self.fuga_k, bool) or not isinstance(self.fuga_k, int) or self.fuga_k < 1:
            raise EngineConfigError(f"fuga_k: must be a positive integer, got {self.fuga_k!r}")
        if not (math.isfinite(self.fuga_lambda) and self.fuga_lambda >= 0):
            raise EngineConfigError(f"fuga_lambda: must be finite and >= 0, got {self.fuga_lambda}")
        set_(self, "fuga_lambda", float(self.fuga_lambda))
        groups = self.protected_groups
        if isinstance(groups, str) or not all(isinstance(g, str) and g for g in groups):
            raise EngineConfigError("protected_groups: a list of non-empty group names")
        set_(self, "protected_groups", tuple(sorted(set(groups))))
        for name in ("reclaim_after", "reclaim_grace", "reclaim_min_runtime"):
            set_(self, name, float(getattr(self, name)))

    # ---- named constructors ------------------------------------------------------------
    @classmethod
    def mesos(cls, scheduler: str | None = None, **changes: Any) -> EngineConfig:
        """Mesos 1.x's allocator: role level, 1 s tick, 5 s refuse filter (the defaults);
        `scheduler` None: the default one."""
        return cls(**_scheduler(scheduler), **changes)

    @classmethod
    def flat(cls, scheduler: str | None = None, **changes: Any) -> EngineConfig:
        """Per-framework fairness with freed resources re-allocated at once: the setting in
        which the criteria alone, not Mesos's timing, separate the schedulers."""
        changes = {"level": "framework", "trigger": Trigger.RELEASE, **changes}
        return cls(**_scheduler(scheduler), **changes)

    # ---- derived -----------------------------------------------------------------------
    @property
    def effective_selection(self) -> Selection:
        from allocator.policy import scheduler

        return self.selection or scheduler(self.scheduler).default_selection

    def policy_params(self) -> dict[str, object]:
        """The parameters set here of the criteria and selections that take any, by plugin
        name (allocator.policy.registry)."""
        from allocator.policy.fuga import FugaParams

        return {"fuga": FugaParams(k=self.fuga_k, lam=self.fuga_lambda)}

    @property
    def reclaims(self) -> bool:
        return self.reclaim_after > 0

    def reclaim_limits(self) -> ReclaimLimits:
        """The reclaim knobs as allocator.reclaim takes them."""
        from allocator.reclaim import ReclaimLimits

        return ReclaimLimits(
            reclaim_after=self.reclaim_after,
            min_runtime=self.reclaim_min_runtime,
            per_run=self.reclaim_per_run,
            per_minute=self.reclaim_per_minute,
        )

    def replace(self, **changes: Any) -> EngineConfig:
        return replace(self, **changes)

    def with_default_role_weights(self, weights: Mapping[str, float]) -> EngineConfig:
        """`weights` (e.g. a batch file's group weights) under the ones set here."""
        merged = {**weights, **self.role_weights}
        return self if merged == dict(self.role_weights) else self.replace(role_weights=merged)

    def to_json(self) -> dict[str, Any]:
        """Every setting; FUGA's K and lambda only when FUGA's selection decides with them."""
        data: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "selection":
                value = self.effective_selection
            if isinstance(value, Mapping):
                value = dict(value)
            data[item.name] = str(value) if isinstance(value, StrEnum) else value
        if data["selection"] != "fuga":
            del data["fuga_k"], data["fuga_lambda"]
        if not self.reclaims:  # outputs from before reclaim existed stay the same
            for name in RECLAIM_FIELDS:
                del data[name]
        else:
            data["protected_groups"] = list(self.protected_groups)
        return data

    def __hash__(self) -> int:
        values = (getattr(self, item.name) for item in fields(self))
        return hash(tuple(tuple(v.items()) if isinstance(v, Mapping) else v for v in values))


def _scheduler(name: str | None) -> dict[str, str]:
    return {} if name is None else {"scheduler": name}


def setting_types() -> dict[str, Any]:
    """Each field's type, resolved (this imports the enums: not for --help)."""
    import typing

    from allocator.policy import Selection, Ties
    from allocator.policy.levels import Level
    from allocator.state import Mode

    names = {"Mode": Mode, "Selection": Selection, "Level": Level, "Ties": Ties}
    return typing.get_type_hints(EngineConfig, localns=names)
