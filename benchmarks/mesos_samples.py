"""A real Mesos master's `/master/state`, read as a batch run measures it: executors per agent
and per group, and the cpus/mem they hold. Pure functions, no I/O (benchmarks/live_mesos.py
polls the master and feeds them).

An executor is a non-terminal task of an active framework. Its group comes from its
framework's name when that starts with `GROUP-` (Spark's own Mesos backend registers one
framework per job, named after `spark.app.name`, e.g. `pi-q0-j0`), else from its resource
shape (fairbroker's one framework carries every group's executors; the batch's groups have
distinct executor vectors).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

LIVE_STATES = frozenset({"TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING"})
OTHER = "other"


@dataclass(frozen=True)
class MasterSample:
    """One reading of the master: executors per agent (by the scenario's agent name) and
    group, resources held per group, the agents' capacity, frameworks registered."""

    executors: dict[str, dict[str, int]]  # agent name -> group -> executors
    allocated: dict[str, dict[str, float]]  # group -> resource -> amount
    capacity: dict[str, float]  # summed over the active agents
    frameworks: int

    def by_type(self, agent_type: Mapping[str, str]) -> dict[str, dict[str, int]]:
        """Executors per agent type and group (agents not in `agent_type` under "?")."""
        out: dict[str, dict[str, int]] = {}
        for agent, groups in self.executors.items():
            row = out.setdefault(agent_type.get(agent, "?"), {})
            for group, n in groups.items():
                row[group] = row.get(group, 0) + n
        return out

    def to_allocation(self) -> dict[str, Any]:
        """The sample as fairbroker's `Allocation` message in protobuf JSON (what allocator.
        batch.allocation parses), one tenant per group, so the batch runner's series and
        result treat every way of running the batch alike."""
        return {
            "tenants": [
                {
                    "tenantId": group,
                    "group": group,
                    "allocated": amounts,
                    "running": sum(g.get(group, 0) for g in self.executors.values()),
                }
                for group, amounts in self.allocated.items()
            ],
            "agents": [
                {"name": agent, "executors": dict(groups)}
                for agent, groups in self.executors.items()
            ],
        }


def _scalars(resources: Any) -> dict[str, float]:
    """A task's `resources` in /master/state: {"cpus": 2.0, "mem": 1024.0, "ports": "[...]"}."""
    if not isinstance(resources, Mapping):
        return {}
    out = {}
    for name, value in resources.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[str(name)] = float(value)
    return out


def group_of(
    framework_name: str, resources: Mapping[str, float], shapes: Mapping[str, Mapping[str, float]]
) -> str:
    """The batch group an executor belongs to (OTHER when neither its framework's name nor
    its cpus/mem match one)."""
    for group in shapes:
        if framework_name.startswith(f"{group}-"):
            return group
    for group, shape in shapes.items():
        if all(abs(resources.get(r, 0.0) - v) < 1e-6 for r, v in shape.items()):
            return group
    return OTHER


def parse_state(
    state: Mapping[str, Any],
    shapes: Mapping[str, Mapping[str, float]],
    agent_names: Mapping[str, str],
    resources: Sequence[str] = ("cpus", "mem"),
) -> MasterSample:
    """A MasterSample from `/master/state`. `shapes`: each group's executor vector (cpus,
    mem); `agent_names`: agent hostname -> the scenario's agent name."""
    id_to_name: dict[str, str] = {}
    capacity = np.zeros(len(resources))
    for agent in state.get("slaves", []):
        name = agent_names.get(str(agent.get("hostname")), str(agent.get("hostname")))
        id_to_name[str(agent.get("id"))] = name
        if agent.get("active", True):
            totals = _scalars(agent.get("resources"))
            capacity += np.array([totals.get(r, 0.0) for r in resources])
    executors: dict[str, dict[str, int]] = {name: {} for name in id_to_name.values()}
    held: dict[str, np.ndarray] = {}
    frameworks = 0
    for framework in state.get("frameworks", []):
        if not framework.get("active", True):
            continue
        frameworks += 1
        name = str(framework.get("name", ""))
        for task in framework.get("tasks", []):
            if task.get("state") not in LIVE_STATES:
                continue
            amounts = _scalars(task.get("resources"))
            group = group_of(name, amounts, shapes)
            agent = id_to_name.get(str(task.get("slave_id")), str(task.get("slave_id")))
            row = executors.setdefault(agent, {})
            row[group] = row.get(group, 0) + 1
            vector = np.array([amounts.get(r, 0.0) for r in resources])
            held[group] = held.get(group, np.zeros(len(resources))) + vector
    return MasterSample(
        executors=executors,
        allocated={g: dict(zip(resources, v.tolist(), strict=True)) for g, v in held.items()},
        capacity=dict(zip(resources, capacity.tolist(), strict=True)),
        frameworks=frameworks,
    )


def time_average(times: Sequence[float], values: np.ndarray, end: float) -> np.ndarray:
    """Step-wise time average over [times[0], end] of `values` (one row per sample, each held
    until the next sample)."""
    t = np.asarray(times, dtype=float)
    if t.size == 0 or end <= t[0]:
        return np.zeros(values.shape[1:]) if values.ndim > 1 else np.zeros(())
    held = np.diff(np.append(np.minimum(t, end), end))
    weights = np.clip(held, 0.0, None)
    return np.tensordot(weights, values, axes=(0, 0)) / weights.sum()


def type_series(
    samples: Sequence[Mapping[str, Any]], types: Sequence[str], groups: Sequence[str]
) -> np.ndarray:
    """Executors per sample x agent type x group from the raw samples' `by_type`."""
    out = np.zeros((len(samples), len(types), len(groups)))
    for i, sample in enumerate(samples):
        for j, agent_type in enumerate(types):
            row = sample["by_type"].get(agent_type, {})
            out[i, j] = [row.get(g, 0) for g in groups]
    return out
