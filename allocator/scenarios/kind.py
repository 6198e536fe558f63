"""Which format a scenario file is in: a trace (`kind: trace`), a job batch (`groups`) or a
static scenario (`frameworks`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from allocator.errors import ScenarioError, did_you_mean
from allocator.scenarios.files import read_yaml


def scenario_kind(scenario: str | Path | dict) -> Literal["trace", "batch", "static"]:
    """Which simulator a scenario file is for: `kind: trace`, a job batch (`groups`), or a
    static fill (`frameworks`)."""
    data = scenario if isinstance(scenario, dict) else read_yaml(Path(scenario))
    if isinstance(data, dict):
        if data.get("kind") == "trace":
            return "trace"
        if "kind" in data:  # only trace scenarios have a kind
            hint = did_you_mean(str(data["kind"]), ["trace"]) or (
                " (the only kind is trace; job batches and static scenarios have none)"
            )
            raise ScenarioError(f"{scenario}: kind: unknown {data['kind']!r}{hint}")
        if "groups" in data:
            return "batch"
    return "static"
