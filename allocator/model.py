"""Cluster model: named scalar resources, agents, frameworks, and their array form.

Scenario files are validated by the pydantic models below; `Cluster` is the immutable
numpy view the policy code works on (agents x resources, frameworks x resources).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from allocator.errors import ScenarioError, did_you_mean

#: Resources every cluster has; a scenario may name more (disk, gpus, ...).
BASE_RESOURCES = ("cpus", "mem")
#: Spellings of the base resources that are typos, not new resources: without a `resources:`
#: list any name an agent offers becomes a resource, so `cpu: 8` would be a 0-cpu agent.
_BASE_MISSPELLINGS = {
    "cpu": "cpus", "cores": "cpus", "core": "cpus", "vcpus": "cpus", "vcpu": "cpus",
    "mems": "mem", "memory": "mem", "ram": "mem", "mem_mb": "mem", "memory_mb": "mem",
}

Name = Annotated[str, Field(min_length=1)]


def check_amounts(values: dict[str, float], what: str) -> dict[str, float]:
    for resource, amount in values.items():
        if not isinstance(amount, int | float) or isinstance(amount, bool):
            raise ValueError(f"{resource}: must be a number, got {amount!r}")
        if math.isnan(amount) or math.isinf(amount):
            raise ValueError(f"{resource}: must be finite, got {amount}")
        if amount < 0:
            raise ValueError(f"{resource}: must not be negative, got {amount}")
    if not any(amount > 0 for amount in values.values()):
        raise ValueError(f"{what} must be positive in at least one resource")
    return values


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    resources: dict[str, float]
    attributes: dict[str, str | int | float | bool] = {}

    @field_validator("resources", mode="before")
    @classmethod
    def _resources(cls, value: object) -> object:
        if not isinstance(value, dict):
            return value
        for resource in value:
            meant = _misspelt_base(str(resource))
            if meant is not None:
                raise ValueError(f"{resource}: unknown resource (did you mean {meant}?)")
        return check_amounts(value, "capacity")


def _misspelt_base(resource: str) -> str | None:
    """The base resource a name misspells (`cpu`, `Mem`, `memory`), or None."""
    if resource in BASE_RESOURCES:
        return None
    if resource.lower() in BASE_RESOURCES:
        return resource.lower()
    return _BASE_MISSPELLINGS.get(resource.lower())


class FrameworkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Name
    role: str | None = None
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    demand: dict[str, float] | None = None
    constraints: dict[str, str | int | float | bool | list[str | int | float | bool]] = {}
    max_tasks: int | None = Field(default=None, ge=0)

    @field_validator("demand", mode="before")
    @classmethod
    def _demand(cls, value: object) -> object:
        return check_amounts(value, "demand") if isinstance(value, dict) else value


class ScenarioSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    resources: list[Name] | None = None
    agents: list[AgentSpec] = Field(min_length=1)
    frameworks: list[FrameworkSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_and_resources(self) -> ScenarioSpec:
        for kind, items in (("agents", self.agents), ("frameworks", self.frameworks)):
            seen: set[str] = set()
            for i, item in enumerate(items):
                if item.name in seen:
                    raise ValueError(f"{kind}[{i}].name: duplicate name {item.name!r}")
                seen.add(item.name)
        known = set(self.resource_names())
        for i, agent in enumerate(self.agents):
            for resource in agent.resources:
                if resource not in known:
                    raise ValueError(
                        f"agents[{i}].resources.{resource}: unknown resource"
                        f"{did_you_mean(resource, known)} (known: {', '.join(sorted(known))})"
                    )
        for i, framework in enumerate(self.frameworks):
            for resource in framework.demand or {}:
                if resource not in known:
                    raise ValueError(
                        f"frameworks[{i}].demand.{resource}: unknown resource "
                        f"(known: {', '.join(sorted(known))})"
                    )
        return self

    def resource_names(self) -> tuple[str, ...]:
        """Declared resources, or cpus and mem plus whatever any agent offers."""
        if self.resources is not None:
            return tuple(self.resources)
        names = list(BASE_RESOURCES)
        for agent in self.agents:
            names.extend(r for r in agent.resources if r not in names)
        return tuple(names)


def matches_constraints(attributes: dict[str, object], constraints: dict[str, object]) -> bool:
    """delta_{n,i}: the agent has every constrained attribute, with one of its allowed values
    (compared as strings)."""
    for key, wanted in constraints.items():
        if key not in attributes:
            return False
        options = wanted if isinstance(wanted, list) else [wanted]
        if str(attributes[key]) not in {str(o) for o in options}:
            return False
    return True


def eligibility_matrix(spec: ScenarioSpec) -> np.ndarray:
    """delta_{n,i} as `matches_constraints` defines it, one vector operation per framework
    constraint: each attribute's values become integer codes over the agents (-1 where
    missing)."""
    eligible = np.ones((len(spec.frameworks), len(spec.agents)), dtype=bool)
    codes: dict[str, tuple[dict[str, int], np.ndarray]] = {}
    for n, framework in enumerate(spec.frameworks):
        for key, wanted in framework.constraints.items():
            if key not in codes:
                values = [str(a.attributes[key]) if key in a.attributes else None
                          for a in spec.agents]  # fmt: skip
                distinct = dict.fromkeys(v for v in values if v is not None)
                index = {v: k for k, v in enumerate(distinct)}
                codes[key] = index, np.array([-1 if v is None else index[v] for v in values])
            index, agent_codes = codes[key]
            options = wanted if isinstance(wanted, list) else [wanted]
            accepted = [index[str(o)] for o in options if str(o) in index]
            eligible[n] &= np.isin(agent_codes, accepted)
    return eligible


def fit_demand_of(demand: np.ndarray) -> np.ndarray:
    """d with inf for a resource a framework without demand lacks, so it fits nowhere
    (column-major: the fit tests read one resource across all frameworks)."""
    return np.asfortranarray(np.nan_to_num(demand, nan=np.inf))


def fit_floor_of(fit_demand: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """d - tol where d > 0, -inf elsewhere (of `fit_demand_of`'s rows): one more task fits
    where the residual reaches the floor in every resource, as the compiled fit tests read it."""
    with np.errstate(invalid="ignore"):
        return np.where(fit_demand > 0, fit_demand - tol, -np.inf)


def held_demand_of(demand: np.ndarray) -> np.ndarray:
    """d with 0 where it is not known: what each task of it holds of each resource."""
    return np.nan_to_num(demand, nan=0.0)


@dataclass(frozen=True, eq=False)
class Cluster:
    """Immutable array view of a scenario.

    Paper notation: c_{i,r} = capacity[i, r], d_{n,r} = demand[n, r], phi_n = weight[n],
    delta_{n,i} = eligible[n, i]. A framework with no declared demand has a NaN row.
    """

    resources: tuple[str, ...]
    agent_names: tuple[str, ...]
    framework_names: tuple[str, ...]
    capacity: np.ndarray  # (A, R)
    demand: np.ndarray  # (F, R), NaN rows where undeclared
    weight: np.ndarray  # (F,)
    eligible: np.ndarray  # (F, A) bool
    max_tasks: np.ndarray  # (F,) float, inf where unlimited
    role_of: np.ndarray  # (F,) int index into role_names
    role_names: tuple[str, ...]
    role_weight: np.ndarray | None = None  # (G,) weight of each role; default 1
    # (F, A) bool: frameworks that could use the agent's room were it offered to their role
    # (Mesos roles, each offered its own copy of an agent: `Engine.pooled_attribute`);
    # None: roles never share an agent's room.
    contested: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.role_weight is None:
            object.__setattr__(self, "role_weight", np.ones(len(self.role_names)))

    @property
    def n_agents(self) -> int:
        return len(self.agent_names)

    @property
    def n_frameworks(self) -> int:
        return len(self.framework_names)

    @cached_property
    def total(self) -> np.ndarray:
        """C_r: cluster-wide capacity per resource."""
        return self.capacity.sum(axis=0)

    @cached_property
    def has_demand(self) -> np.ndarray:
        return ~np.isnan(self.demand).any(axis=1)

    @cached_property
    def held_demand(self) -> np.ndarray:
        """`held_demand_of(demand)`, which `AllocationState.load` reads."""
        return held_demand_of(self.demand)

    @cached_property
    def fit_demand(self) -> np.ndarray:
        """`fit_demand_of(demand)`: every allocation state of the cluster reads it, none
        writes it."""
        return fit_demand_of(self.demand)

    def fit(self, demand: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        """gamma_{n,i} = min_r c_{i,r}/d_{n,r}: tasks of n an empty agent i holds (real-valued).

        `demand` defaults to the declared demand; `rows` selects the frameworks it belongs to
        (for eligibility). Zero where the framework is not eligible or has no demand.
        """
        d = self.demand if demand is None else demand
        eligible = self.eligible if rows is None else self.eligible[rows]
        gamma = np.full((len(d), self.n_agents), np.inf)
        for r in range(len(self.resources)):
            need = d[:, r] > 0  # a resource the task does not use does not bound it
            if need.any():
                ratio = self.capacity[None, :, r] / d[need, r, None]
                gamma[need] = np.minimum(gamma[need], ratio)
        gamma = np.where(np.isfinite(gamma), gamma, 0.0)
        return np.where(eligible, gamma, 0.0)

    @classmethod
    def from_arrays(
        cls,
        capacity: np.ndarray,
        demand: np.ndarray,
        resources: tuple[str, ...] = ("cpus", "mem"),
        weight: np.ndarray | None = None,
        eligible: np.ndarray | None = None,
        max_tasks: np.ndarray | None = None,
        agent_names: tuple[str, ...] | None = None,
        framework_names: tuple[str, ...] | None = None,
    ) -> Cluster:
        """A one-role cluster from arrays; weights 1, every pair eligible and no task limit
        unless given; agents named a0.., frameworks f0.. unless named."""
        capacity = np.asarray(capacity, dtype=float)
        demand = np.asarray(demand, dtype=float)
        n_f, n_a = len(demand), len(capacity)
        return cls(
            resources=tuple(resources),
            agent_names=agent_names or tuple(f"a{i}" for i in range(n_a)),
            framework_names=framework_names or tuple(f"f{n}" for n in range(n_f)),
            capacity=capacity,
            demand=demand,
            weight=np.ones(n_f) if weight is None else np.asarray(weight, dtype=float),
            eligible=np.ones((n_f, n_a), dtype=bool)
            if eligible is None
            else np.asarray(eligible, dtype=bool).reshape(n_f, n_a),
            max_tasks=np.full(n_f, np.inf)
            if max_tasks is None
            else np.asarray(max_tasks, dtype=float),
            role_of=np.zeros(n_f, dtype=np.int64),
            role_names=("*",),
        )

    @classmethod
    def from_spec(cls, spec: ScenarioSpec) -> Cluster:
        resources = spec.resource_names()
        capacity = np.array(
            [[agent.resources.get(r, 0.0) for r in resources] for agent in spec.agents],
            dtype=float,
        )
        demand = np.array(
            [
                [f.demand.get(r, 0.0) for r in resources] if f.demand else [np.nan] * len(resources)
                for f in spec.frameworks
            ],
            dtype=float,
        )
        eligible = eligibility_matrix(spec)
        roles: list[str] = []
        role_of = []
        for f in spec.frameworks:
            role = f.role or "*"
            if role not in roles:
                roles.append(role)
            role_of.append(roles.index(role))
        return cls(
            resources=resources,
            agent_names=tuple(a.name for a in spec.agents),
            framework_names=tuple(f.name for f in spec.frameworks),
            capacity=capacity,
            demand=demand,
            weight=np.array([f.weight for f in spec.frameworks], dtype=float),
            eligible=eligible,
            max_tasks=np.array(
                [np.inf if f.max_tasks is None else f.max_tasks for f in spec.frameworks],
                dtype=float,
            ),
            role_of=np.array(role_of, dtype=np.int64),
            role_names=tuple(roles),
        )

    def check_runnable(self) -> None:
        """Every framework has a demand and fits, alone, on at least one eligible agent."""
        for n, name in enumerate(self.framework_names):
            if not self.has_demand[n]:
                raise ScenarioError(f"frameworks[{n}].demand: missing for {name!r}")
        fits = (self.demand[:, None, :] <= self.capacity[None, :, :] + 1e-9).all(axis=2)
        fits &= self.eligible
        for n in np.flatnonzero(~fits.any(axis=1)):
            name = self.framework_names[n]
            where = "eligible agent" if not self.eligible[n].all() else "agent"
            raise ScenarioError(
                f"frameworks[{n}].demand: {name!r} fits no {where}; it can never run"
            )
