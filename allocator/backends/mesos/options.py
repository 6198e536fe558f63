"""How the broker runs as a Mesos framework (`MesosOptions`), and how its roles name the
engine's agents: with one role an engine agent is the Mesos agent id; with several, an agent
offered to role R is a separate engine agent `AGENT@R` carrying the attribute
`mesos_role=R` (role names hold no '@', agent ids may)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from allocator.backends.executor import ExecutorEnvPolicy
from allocator.mesos_defaults import REFUSE_SECONDS

ROLE_ATTRIBUTE = "mesos_role"
HEARTBEAT_SECONDS = 15.0  # the master's fixed interval
MISSED_HEARTBEATS = 5  # then the connection is considered dead and re-established
AGENTS_LOOK_S = 15.0  # how often the master's agent list is read (for health, hostnames)
# SIGTERM to SIGKILL of a killed executor (the KILL's kill_policy): the same gap as the
# embedded cluster's. A reclaimed executor has had --reclaim-grace to leave before its KILL;
# this is only its time to shut down (Mesos's own default would be 3 s).
KILL_GRACE_S = 5.0
# How long a task stays the broker's while the master says it does not know the task's agent
# (a master restarted with an in-memory registry learns its agents as they re-register, and
# an agent notices the new master only after agent_ping_timeout x max_agent_ping_timeouts
# without a ping, 75 s by default; measured on the real 1.11 master: 74.8 s). By default the
# grace is that product, read from the master's /master/flags, plus AGENT_RETURN_MARGIN_S
# for the agent's registration back-off; AGENT_RETURN_GRACE_S until the flags are read.
AGENT_RETURN_MARGIN_S = 30.0
AGENT_RETURN_GRACE_S = 15.0 * 5 + AGENT_RETURN_MARGIN_S


@dataclass
class MesosOptions:
    master: str  # HOST:5050 or zk://...
    roles: tuple[str, ...] = ("*",)
    principal: str | None = None
    secret: str | None = field(default=None, repr=False)  # never in logs or reprs
    failover_timeout: float = 7 * 24 * 3600.0
    framework_name: str = "fairbroker"
    user: str | None = None  # the user tasks run as (default: the broker's own)
    hostname: str | None = None
    webui_url: str | None = None
    gpus: bool = False  # GPU_RESOURCES: without it Mesos never offers GPU agents
    spark_home: str = "/opt/spark"  # where Spark is on the agents
    spark_uri: str | None = None  # or a Spark tarball the agents fetch into the sandbox
    heartbeat_timeout: float = MISSED_HEARTBEATS * HEARTBEAT_SECONDS
    refuse_seconds: float = REFUSE_SECONDS  # the engine's (EngineConfig.refuse_seconds)
    agents_look_seconds: float = AGENTS_LOOK_S  # how often the master's agent list is read
    kill_grace: float = KILL_GRACE_S  # every KILL's kill_policy.grace_period (seconds)
    agent_return_grace: float | None = None  # a task's agent unknown to the master (None:
    # from the master's ping flags, see AGENT_RETURN_MARGIN_S)
    state_dir: Path = Path(".fairbroker")
    # a framework the master removed for good is replaced by a new one (not by a teardown)
    register_anew_if_removed: bool = True
    executor_env: ExecutorEnvPolicy = field(default_factory=ExecutorEnvPolicy)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("kill_grace", "agent_return_grace"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < float("inf"):
                raise ValueError(f"{name}: must be a finite number >= 0, got {value}")

    def kill_policy(self) -> dict:
        """The KILL call's `kill_policy`: SIGTERM, then SIGKILL after `kill_grace`."""
        return {"grace_period": {"nanoseconds": round(self.kill_grace * 1e9)}}

    @property
    def http_auth(self) -> tuple[str, str] | None:
        """HTTP basic credentials for the master's endpoints (None without a principal)."""
        return (self.principal, self.secret or "") if self.principal else None

    @property
    def several_roles(self) -> bool:
        return len(self.roles) > 1

    def agent_key(self, agent_id: str, role: str) -> str:
        """The engine agent of a Mesos agent offered to `role`."""
        return f"{agent_id}@{role}" if self.several_roles else agent_id

    def agent_id(self, key: str) -> str:
        """The Mesos agent id of an engine agent (`AGENT` or `AGENT@ROLE`)."""
        return key.rsplit("@", 1)[0] if self.several_roles else key

    def role_attributes(self, key: str) -> dict[str, str]:
        """The attribute an engine agent carries for its role (none with one role)."""
        return {ROLE_ATTRIBUTE: key.rsplit("@", 1)[1]} if self.several_roles else {}
