"""One validated configuration of the online engine, passed whole.

Every command that runs the engine (`fill`, `sim`, `whatif`, `serve`, `batch`), both
simulators and the broker build an `EngineConfig` once and hand it on; nothing below them
takes the options one by one. The defaults are Mesos's (`EngineConfig.mesos()`): role-level
fairness, an allocation run every second, freed resources waiting for it, and a 5 s refuse
filter on declined resources.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from allocator.errors import FairbrokerError
from allocator.mesos_defaults import ALLOCATION_INTERVAL_SECONDS, REFUSE_SECONDS
from allocator.policy import Selection, Ties, scheduler
from allocator.policy.levels import Level
from allocator.state import Mode

#: Role (group) weights are bounded like tenant weights (allocator.broker.limits).
MAX_ROLE_WEIGHT = 1000.0
#: An allocation run every hour at most. A run also expires leases (30 s by default), forgets
#: executors that never reported their exit (60 s) and ends rests (60-900 s), so a longer
#: interval only delays those; and the broker's loop waits on a timer that overflows past
#: threading.TIMEOUT_MAX (~292 years: `--interval 1e10` killed the loop thread).
MAX_INTERVAL_SECONDS = 3600.0


class Trigger(StrEnum):
    """tick: freed resources wait for the next periodic run (Mesos). release: run at once."""

    TICK = "tick"
    RELEASE = "release"


class EngineConfigError(FairbrokerError):
    """An engine option out of range or unknown; the message names the option."""


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


@dataclass(frozen=True)
class EngineConfig:
    """What the engine decides with. Strings are accepted for the enum fields and
    converted; every field is checked once, here."""

    scheduler: str = "drf"
    mode: Mode = Mode.CHARACTERIZED
    selection: Selection | None = None  # None: the scheduler's own default
    level: Level = Level.ROLE
    trigger: Trigger = Trigger.TICK
    ties: Ties = Ties.RANDOM
    seed: int = 0
    refuse_seconds: float = REFUSE_SECONDS
    interval: float = ALLOCATION_INTERVAL_SECONDS
    role_weights: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise in place once
        set_(self, "scheduler", scheduler(self.scheduler).name)  # did-you-mean on a typo
        set_(self, "mode", _enum(Mode, self.mode, "mode"))
        if self.selection is not None:
            set_(self, "selection", _enum(Selection, self.selection, "selection"))
        set_(self, "level", _enum(Level, self.level, "level"))
        set_(self, "trigger", _enum(Trigger, self.trigger, "trigger"))
        set_(self, "ties", _enum(Ties, self.ties, "ties"))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise EngineConfigError(f"seed: must be a non-negative integer, got {self.seed!r}")
        if not (math.isfinite(self.refuse_seconds) and self.refuse_seconds >= 0):
            raise EngineConfigError(
                f"refuse_seconds: must be finite and >= 0, got {self.refuse_seconds}"
            )
        if not (math.isfinite(self.interval) and 0 < self.interval <= MAX_INTERVAL_SECONDS):
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

    # ---- named constructors ------------------------------------------------------------
    @classmethod
    def mesos(cls, scheduler: str = "drf", **changes: Any) -> EngineConfig:
        """Mesos 1.x's allocator: role level, 1 s tick, 5 s refuse filter (the defaults)."""
        return cls(scheduler, **changes)

    @classmethod
    def flat(cls, scheduler: str = "drf", **changes: Any) -> EngineConfig:
        """Per-framework fairness with freed resources re-allocated at once: the setting in
        which the criteria alone, not Mesos's timing, separate the schedulers."""
        changes = {"level": Level.FRAMEWORK, "trigger": Trigger.RELEASE, **changes}
        return cls(scheduler, **changes)

    # ---- derived -----------------------------------------------------------------------
    @property
    def effective_selection(self) -> Selection:
        return self.selection or scheduler(self.scheduler).default_selection

    def replace(self, **changes: Any) -> EngineConfig:
        return replace(self, **changes)

    def with_default_role_weights(self, weights: Mapping[str, float]) -> EngineConfig:
        """`weights` (e.g. a batch file's group weights) under the ones set here."""
        merged = {**weights, **self.role_weights}
        return self if merged == dict(self.role_weights) else self.replace(role_weights=merged)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {name: getattr(self, name) for name in _SCALAR_FIELDS}
        data["selection"] = self.effective_selection
        data = {k: (str(v) if isinstance(v, StrEnum) else v) for k, v in data.items()}
        return data | {"role_weights": dict(self.role_weights)}

    def __hash__(self) -> int:
        return hash((*(getattr(self, f) for f in _SCALAR_FIELDS), tuple(self.role_weights.items())))


_SCALAR_FIELDS = (
    "scheduler", "mode", "selection", "level", "trigger", "ties", "seed", "refuse_seconds",
    "interval",
)  # fmt: skip
