"""Static scenarios (agents and frameworks, `fairbroker fill` and `solve`): YAML or JSON into a
validated `Cluster` (the schema is allocator.model's `ScenarioSpec`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from allocator.errors import ScenarioError, did_you_mean
from allocator.memory_guard import FILL_BYTES_PER_PAIR, require_memory
from allocator.model import Cluster, ScenarioSpec
from allocator.scenarios.files import load_file, validate


def _refuse_other_kinds(data: dict) -> None:
    """A trace (`kind:`) or job batch (`groups:`) given where a static scenario is read: say
    which it is (or that its kind is misspelt) rather than that `agents` is missing."""
    if "kind" in data:
        kind = data["kind"]
        if kind == "trace":
            raise ScenarioError("a trace scenario (kind: trace); run it with `fairbroker sim`")
        hint = did_you_mean(str(kind), ["trace"]) or " (the only kind is trace)"
        raise ScenarioError(f"kind: unknown {kind!r}{hint}; a static scenario has no kind")
    if "groups" in data and "frameworks" not in data:
        raise ScenarioError("a job batch (groups); run it with `fairbroker sim`")


def parse_scenario(data: Any) -> Cluster:
    """Validate a scenario given as plain data (dicts and lists)."""
    if not isinstance(data, dict):
        raise ScenarioError("scenario: expected a mapping with 'agents' and 'frameworks'")
    _refuse_other_kinds(data)
    spec = validate(ScenarioSpec, data)
    n_f, n_a = len(spec.frameworks), len(spec.agents)
    require_memory(n_f * n_a * FILL_BYTES_PER_PAIR, f"{n_f:,} frameworks x {n_a:,} agents")
    return Cluster.from_spec(spec)


def load_scenario(path: str | Path) -> Cluster:
    """Read a YAML or JSON scenario file (JSON is valid YAML)."""
    return load_file(path, parse_scenario)
