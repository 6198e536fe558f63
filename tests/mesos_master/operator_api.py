"""Read-only views: /master/state, /metrics/snapshot, /version and the v1 operator API.

Callers hold `MasterCore.lock`.
"""

from __future__ import annotations

import time
from typing import Any

from . import events, wire
from . import resources as res
from .core import MasterCore
from .state import ALL_TASK_STATES, TERMINAL_STATES, Agent, Framework, Task

BUILD_TIME = 1_600_000_000.0


def version() -> dict[str, Any]:
    return {
        "version": events.VERSION, "build_date": "2020-09-13 12:26:40",
        "build_time": BUILD_TIME, "build_user": "fairbroker-tests",
    }  # fmt: skip


def _used(core: MasterCore, agent: Agent | None = None,
          framework: Framework | None = None) -> res.Millis:  # fmt: skip
    total: res.Millis = {}
    for f in core.frameworks.values():
        if framework is not None and f is not framework:
            continue
        for task in f.tasks.values():
            if not task.resources_released and (agent is None or task.agent_id == agent.id):
                total = res.add(total, task.resources)
    return total


def _offered(core: MasterCore, agent: Agent | None = None,
             framework: Framework | None = None) -> res.Millis:  # fmt: skip
    total: res.Millis = {}
    for offer in core.offers.values():
        if (agent is None or offer.agent_id == agent.id) and (
            framework is None or offer.framework_id == framework.id
        ):
            total = res.add(total, offer.resources)
    return total


def _state_task(task: Task) -> dict[str, Any]:
    return {
        "id": task.task_id, "name": task.name, "framework_id": task.framework_id,
        "executor_id": "", "slave_id": task.agent_id, "state": task.state,
        "resources": res.flatten(task.resources), "role": task.role,
        "statuses": [{"state": s["state"], "timestamp": s.get("timestamp", 0.0)}
                     for s in task.statuses],
    }  # fmt: skip


def _state_framework(core: MasterCore, f: Framework) -> dict[str, Any]:
    used, offered = _used(core, framework=f), _offered(core, framework=f)
    body: dict[str, Any] = {
        "id": f.id, "name": f.name, "user": f.info.get("user", ""),
        "hostname": f.info.get("hostname", ""), "webui_url": f.info.get("webui_url", ""),
        "capabilities": sorted(f.capabilities), "active": f.active, "connected": f.connected,
        "recovered": f.recovered, "failover_timeout": f.failover_timeout,
        "checkpoint": bool(f.info.get("checkpoint", False)),
        "registered_time": f.registered_time,
        "unregistered_time": f.unregistered_time or 0.0,
        "used_resources": res.flatten(used), "offered_resources": res.flatten(offered),
        "resources": res.flatten(res.add(used, offered)),
        "tasks": [_state_task(t) for t in f.tasks.values()],
        "unreachable_tasks": [], "executors": [],
        "completed_tasks": [_state_task(t) for t in f.completed_tasks],
        "offers": [
            {"id": o.id, "framework_id": o.framework_id, "slave_id": o.agent_id,
             "resources": res.flatten(o.resources)}
            for o in core.offers.values() if o.framework_id == f.id
        ],
    }  # fmt: skip
    if f.multi_role:
        body["roles"] = f.roles
    else:
        body["role"] = f.roles[0]
    if "principal" in f.info:
        body["principal"] = f.info["principal"]
    return body


def _state_agent(core: MasterCore, agent: Agent) -> dict[str, Any]:
    return {
        "id": agent.id, "hostname": agent.hostname, "port": agent.spec.port,
        "pid": f"slave(1)@{agent.hostname}:{agent.spec.port}",
        "attributes": dict(agent.spec.attributes), "registered_time": agent.registered_time,
        "resources": res.flatten(agent.total), "unreserved_resources": res.flatten(agent.total),
        "reserved_resources": {}, "used_resources": res.flatten(_used(core, agent)),
        "offered_resources": res.flatten(_offered(core, agent)), "active": True,
        "deactivated": False, "version": events.VERSION,
        "capabilities": ["MULTI_ROLE", "HIERARCHICAL_ROLE", "RESERVATION_REFINEMENT"],
    }  # fmt: skip


def master_state(core: MasterCore) -> dict[str, Any]:
    live = [a for a in core.agents.values() if a.active]
    info = core.master_info()
    pid = info["pid"]
    return {
        **version(), "start_time": core.start_time, "elected_time": core.elected_time,
        "id": core.master_id, "pid": pid, "hostname": core.ip,
        "capabilities": ["AGENT_UPDATE", "AGENT_DRAINING"],
        "activated_slaves": float(len(live)), "deactivated_slaves": 0.0,
        "unreachable_slaves": float(len(core.agents) - len(live)),
        "leader": pid, "leader_info": info,
        "flags": {
            "allocation_interval": f"{core.allocation_interval:g}secs",
            "allocator": "hierarchical", "min_allocatable_resources": "cpus:0.01|mem:32",
        },
        "slaves": [_state_agent(core, a) for a in live],
        "recovered_slaves": [],
        "frameworks": [_state_framework(core, f) for f in core.frameworks.values()
                       if not f.removed],
        "completed_frameworks": [_state_framework(core, f) for f in core.frameworks.values()
                                 if f.removed],
        "orphan_tasks": [], "unregistered_frameworks": [],
    }  # fmt: skip


def metrics(core: MasterCore) -> dict[str, float]:
    live = [a for a in core.agents.values() if a.active]
    frameworks = [f for f in core.frameworks.values() if not f.removed]
    out: dict[str, float] = {
        "master/elected": 1.0, "master/uptime_secs": time.time() - core.start_time,
        "master/slaves_active": float(len(live)), "master/slaves_connected": float(len(live)),
        "master/slaves_disconnected": 0.0, "master/slaves_inactive": 0.0,
        "master/slaves_unreachable": float(len(core.agents) - len(live)),
        "master/frameworks_active": float(sum(f.active for f in frameworks)),
        "master/frameworks_inactive": float(sum(not f.active for f in frameworks)),
        "master/frameworks_connected": float(sum(f.connected for f in frameworks)),
        "master/frameworks_disconnected": float(sum(not f.connected for f in frameworks)),
        "master/outstanding_offers": float(len(core.offers)),
        "allocator/mesos/allocation_runs": 0.0,
    }  # fmt: skip
    total: res.Millis = {}
    for agent in live:
        total = res.add(total, agent.total)
    used = _used(core)
    for name in ("cpus", "mem", "disk", "gpus"):
        t, u = res.value(total.get(name, 0)), res.value(used.get(name, 0))
        out[f"master/{name}_total"] = t
        out[f"master/{name}_used"] = u
        out[f"master/{name}_percent"] = u / t if t else 0.0
        offered = res.value(res.add(used, _offered(core)).get(name, 0))
        out[f"allocator/mesos/resources/{name}/total"] = t
        out[f"allocator/mesos/resources/{name}/offered_or_allocated"] = offered
    tasks = [t for f in core.frameworks.values() for t in f.tasks.values()]
    for state in ALL_TASK_STATES:
        short = state.removeprefix("TASK_").lower()
        if state in TERMINAL_STATES:
            out[f"master/tasks_{short}"] = core.metrics.get(f"master/tasks_{short}/total", 0.0)
        else:
            out[f"master/tasks_{short}"] = float(sum(t.state == state for t in tasks))
    for key, value in core.metrics.items():
        if not key.startswith("master/tasks_"):
            out[key] = float(value)
    for f in frameworks:
        prefix = f"master/frameworks/{f.name}/{f.id}"
        for key, value in f.counters.items():
            out[f"{prefix}/{key}"] = float(value)
        for role in f.roles:
            out[f"{prefix}/roles/{role}/suppressed"] = float(role in f.suppressed)
    return out


# The v1 operator API ---------------------------------------------------------------------


def _v1_task(task: Task) -> dict[str, Any]:
    return {
        "name": task.name, "task_id": {"value": task.task_id},
        "framework_id": {"value": task.framework_id}, "agent_id": {"value": task.agent_id},
        "state": task.state, "resources": res.to_json(task.resources, task.role),
        "statuses": [s for s in task.statuses if "task_id" in s],
    }  # fmt: skip


def _ns(seconds: float) -> dict[str, int]:
    return {"nanoseconds": int(seconds * 1e9)}


def get_tasks(core: MasterCore) -> dict[str, Any]:
    return {
        "tasks": [_v1_task(t) for f in core.frameworks.values() for t in f.tasks.values()],
        "completed_tasks": [_v1_task(t) for f in core.frameworks.values()
                            for t in f.completed_tasks],
    }  # fmt: skip


def get_frameworks(core: MasterCore) -> dict[str, Any]:
    def one(f: Framework) -> dict[str, Any]:
        return {
            "framework_info": f.info, "active": f.active, "connected": f.connected,
            "recovered": f.recovered, "registered_time": _ns(f.registered_time),
            "offered_resources": res.to_json(_offered(core, framework=f), None),
            "allocated_resources": res.to_json(_used(core, framework=f), None),
        }  # fmt: skip

    return {
        "frameworks": [one(f) for f in core.frameworks.values() if not f.removed],
        "completed_frameworks": [one(f) for f in core.frameworks.values() if f.removed],
    }


def get_agents(core: MasterCore) -> dict[str, Any]:
    agents = []
    for agent in core.agents.values():
        if not agent.active:
            continue
        agents.append({
            "agent_info": {
                "id": {"value": agent.id}, "hostname": agent.hostname, "port": agent.spec.port,
                "resources": res.to_json(agent.total, None),
                "attributes": res.attributes_json(agent.spec.attributes),
            },
            "active": True, "version": events.VERSION,
            "pid": f"slave(1)@{agent.hostname}:{agent.spec.port}",
            "registered_time": _ns(agent.registered_time),
            "total_resources": res.to_json(agent.total, None),
            "allocated_resources": res.to_json(_used(core, agent), None),
            "offered_resources": res.to_json(_offered(core, agent), None),
        })  # fmt: skip
    return {"agents": agents}


def operator_call(core: MasterCore, obj: Any) -> wire.Answer:
    if not isinstance(obj, dict):
        return wire.Answer.text(400, "Failed to convert JSON into Call protobuf: not an object")
    kind = obj.get("type")
    if not isinstance(kind, str):
        return wire.Answer.text(
            400, "Failed to validate master::Call: Expecting 'type' to be present"
        )
    with core.lock:
        bodies = {
            "GET_HEALTH": lambda: {"healthy": True},
            "GET_VERSION": lambda: {"version_info": version()},
            "GET_TASKS": lambda: get_tasks(core),
            "GET_FRAMEWORKS": lambda: get_frameworks(core),
            "GET_AGENTS": lambda: get_agents(core),
            "GET_METRICS": lambda: {
                "metrics": [{"name": k, "value": v} for k, v in metrics(core).items()]
            },
            "GET_STATE": lambda: {
                "get_tasks": get_tasks(core), "get_executors": {},
                "get_frameworks": get_frameworks(core), "get_agents": get_agents(core),
            },
        }  # fmt: skip
        make = bodies.get(kind)
        if make is None:
            return wire.Answer.text(501, f"The test master does not implement {kind}")
        return wire.Answer.json(events.compact({"type": kind, kind.lower(): make()}))

