"""The embedded cluster's agents, declared in YAML (default: allocator/data/local-cluster.yaml).

```yaml
memory_scale: 0.5            # documentation only: how the capacities relate to real servers
agents:
  - {name: t1-a, hostname: 127.0.1.1, resources: {cpus: 4, mem: 7168}, attributes: {type: t1}}
```
`hostname` defaults to 127.0.1.<k> for the k-th agent (any 127.0.0.0/8 address is local).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from allocator.backends.base import AgentInfo
from allocator.errors import ScenarioError
from allocator.model import AgentSpec
from allocator.scenarios.files import load_file, validate

DEFAULT_CLUSTER = Path(__file__).parents[1] / "data" / "local-cluster.yaml"


class LocalAgentSpec(AgentSpec):
    hostname: str | None = None


class LocalClusterSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    memory_scale: float = Field(default=1.0, gt=0)
    agents: list[LocalAgentSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> LocalClusterSpec:
        names = [a.name for a in self.agents]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"agents: duplicate name {name!r}")
        return self


def agent_infos(agents: Sequence[AgentSpec]) -> list[AgentInfo]:
    """Agents with their loopback hostnames (given, or 127.0.1.<k>)."""
    if len(agents) > 254:
        raise ScenarioError("local cluster: at most 254 agents")
    return [
        AgentInfo(
            name=a.name,
            hostname=getattr(a, "hostname", None) or f"127.0.1.{k + 1}",
            resources=dict(a.resources),
            attributes={key: str(value) for key, value in a.attributes.items()},
        )
        for k, a in enumerate(agents)
    ]


def load_cluster_file(path: str | Path = DEFAULT_CLUSTER) -> list[AgentInfo]:
    spec = load_file(path, lambda data: validate(LocalClusterSpec, data))
    return agent_infos(spec.agents)
