"""Non-SUBSCRIBE scheduler calls, after `Master::Http::scheduler`'s framework checks.

Each handler follows the master method of the same name (src/master/master.cpp): the HTTP
answer (202, or 200 for UPDATE_FRAMEWORK and RECONCILE_OPERATIONS) does not depend on what
the call then does, except for the checks made before dispatch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import resources as res
from . import wire
from .core import MasterCore
from .schema import framework_problem
from .state import Framework, Offer, Task

DEFAULT_KILL_GRACE_S = 3.0
_INVALID_ID = re.compile(r"[\x00-\x1f\x7f/\\]")

Handler = Callable[[MasterCore, Framework, dict[str, Any]], wire.Answer | None]


def handle(core: MasterCore, call: dict[str, Any], stream_id: str | None) -> wire.Answer:
    with core.lock:
        framework_id = call["framework_id"]["value"]
        framework = core.frameworks.get(framework_id)
        if framework is None or framework.removed:
            return wire.Answer.text(400, "Framework cannot be found")
        kind = call["type"]
        framework.count(f"calls/{kind.lower()}")
        if not framework.connected:
            return wire.Answer.text(403, "Framework is not subscribed")
        if stream_id is None:
            return wire.Answer.text(
                400, "All non-subscribe calls should include the 'Mesos-Stream-Id' header"
            )
        assert framework.subscription is not None
        if stream_id != framework.subscription.stream_id:
            return wire.Answer.text(
                400,
                f"The stream ID '{stream_id}' included in this request didn't match the stream "
                f"ID currently associated with framework ID {framework_id}",
            )
        if kind == "UNKNOWN":
            return wire.Answer(501)
        handler = HANDLERS.get(kind)
        answer = handler(core, framework, call) if handler is not None else None
        return answer if answer is not None else wire.ACCEPTED


def teardown(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    core.count("master/messages_teardown_framework")
    core.remove_framework(framework)


def _offer_problem(core: MasterCore, framework: Framework, ids: list[str]) -> str | None:
    """`validation::offer::validate`, in its order."""
    if not ids:
        return "No offers specified"
    if len(set(ids)) != len(ids):
        duplicate = next(i for i in ids if ids.count(i) > 1)
        return f"Duplicate offer {duplicate} in offer list"
    for offer_id in ids:
        if offer_id not in core.offers:
            return f"Offer {offer_id} is no longer valid"
    for offer_id in ids:
        owner = core.offers[offer_id].framework_id
        if owner != framework.id:
            return (f"Offer {offer_id} has invalid framework {owner} while framework "
                    f"{framework.id} is expected")  # fmt: skip
    roles = {core.offers[i].role for i in ids}
    if len(roles) > 1:
        return f"Aggregated offers must be allocated to the same role. Offer {ids[-1]} differs"
    agents = [core.offers[i].agent_id for i in ids]
    for offer_id, agent_id in zip(ids, agents, strict=True):
        if agent_id != agents[0]:
            return (f"Aggregated offers must belong to one single agent. Offer {offer_id} uses "
                    f"agent {agent_id} and agent {agents[0]}")  # fmt: skip
    return None


def _task_problem(
    core: MasterCore, framework: Framework, task: dict[str, Any], agent_id: str,
    role: str, available: res.Millis, seen: set[str],
) -> tuple[str | None, res.Millis]:  # fmt: skip
    """`validation::task::validate` for a command task, in its order."""
    task_id = task["task_id"]["value"]
    if not task_id:
        return "ID must not be empty", {}
    if task_id in (".", ".."):
        return "ID must not be '.' or '..'", {}
    if _INVALID_ID.search(task_id):
        return f"'{task_id}' contains invalid characters", {}
    if task_id in framework.tasks or task_id in seen:
        return f"Task has duplicate ID: {task_id}", {}
    if task["agent_id"]["value"] != agent_id:
        return (f"Task uses invalid agent {task['agent_id']['value']} while agent {agent_id} "
                "is expected"), {}  # fmt: skip
    grace = task.get("kill_policy", {}).get("grace_period", {}).get("nanoseconds", 0)
    if grace < 0:
        return "Task's 'kill_policy.grace_period' must be non-negative", {}
    if not task.get("resources"):
        return "Task uses no resources", {}
    try:
        wanted, roles = res.parse(task["resources"])
    except res.ResourceError as exc:
        return f"Task uses invalid resources: Invalid resources: {exc}", {}
    if len(roles) > 1:
        first, second = sorted(roles)[:2]
        return ("Invalid task resources: The resources have multiple allocation roles "
                f"('{first}' and '{second}') but only one allocation role is allowed",
                {})  # fmt: skip
    if ("executor" in task) == ("command" in task):
        return ("Task should have at least one (but not both) of CommandInfo or ExecutorInfo "
                "present"), {}  # fmt: skip
    if (roles and roles != {role}) or not res.contains(available, wanted):
        return (f"Total resources {res.stringify(wanted, role)} required by task and its executor "
                f"is more than available {res.stringify(available, role)}"), {}  # fmt: skip
    return None, wanted


def accept(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    body = call["accept"]
    ids = [o["value"] for o in body.get("offer_ids", [])]
    operations = body.get("operations", [])
    core.count("master/messages_accept_offers" if operations else "master/messages_decline_offers")
    problem = _offer_problem(core, framework, ids)
    if problem is not None:
        for offer_id in ids:
            offer = core.offers.get(offer_id)
            if offer is not None and offer.framework_id == framework.id:
                core.recover(offer, offer.resources, None, with_filter=False)
        state = "TASK_DROPPED" if framework.partition_aware else "TASK_LOST"
        for operation in operations:
            for task in _launched_tasks(operation):
                core.master_update(
                    framework, task["task_id"]["value"], state, reason="REASON_INVALID_OFFERS",
                    message=f"Task launched with invalid offers: {problem}",
                )  # fmt: skip
        return
    offers: list[Offer] = [core.offers[i] for i in ids]
    agent_id, role = offers[0].agent_id, offers[0].role
    available: res.Millis = {}
    for offer in offers:
        available = res.add(available, offer.resources)
        del core.offers[offer.id]
    framework.count("offers/accepted", len(offers))
    seen: set[str] = set()
    for operation in operations:
        kind = operation.get("type")
        if kind == "LAUNCH_GROUP":
            for task in _launched_tasks(operation):
                core.master_update(framework, task["task_id"]["value"], "TASK_ERROR",
                                   reason="REASON_TASK_GROUP_INVALID",
                                   message="The test master does not run LAUNCH_GROUP")  # fmt: skip
            continue
        if kind != "LAUNCH":
            continue  # reservations and volumes are not modelled
        core.count("master/messages_launch_tasks")
        for info in operation.get("launch", {}).get("task_infos", []):
            problem, wanted = _task_problem(core, framework, info, agent_id, role, available, seen)
            task_id = info["task_id"]["value"]
            if problem is not None:
                core.master_update(framework, task_id, "TASK_ERROR", reason="REASON_TASK_INVALID",
                                   message=problem, agent_id=agent_id)  # fmt: skip
                continue
            seen.add(task_id)
            available = res.subtract(available, wanted)
            task = Task(task_id, framework.id, agent_id, info["name"], role, wanted, info)
            task.statuses.append({"state": "TASK_STAGING"})
            framework.tasks[task_id] = task
            core.queue_launch(task)
    remainder = Offer("", framework.id, agent_id, role, available, 0.0)
    core.recover(remainder, available, body.get("filters"), with_filter=True)


def _launched_tasks(operation: dict[str, Any]) -> list[dict[str, Any]]:
    if operation.get("type") == "LAUNCH":
        return list(operation.get("launch", {}).get("task_infos", []))
    if operation.get("type") == "LAUNCH_GROUP":
        group = operation.get("launch_group", {}).get("task_group", {})
        return [t for t in group.get("tasks", []) if isinstance(t, dict) and "task_id" in t]
    return []


def decline(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    body = call["decline"]
    core.count("master/messages_decline_offers")
    for offer_id in [o["value"] for o in body.get("offer_ids", [])]:
        offer = core.offers.get(offer_id)
        if offer is None or offer.framework_id != framework.id:
            continue  # unknown offers are dropped, as the master only logs them
        framework.count("offers/declined")
        core.recover(offer, offer.resources, body.get("filters"), with_filter=True)


def _roles(framework: Framework, call: dict[str, Any], key: str) -> set[str] | None:
    """The roles a REVIVE/SUPPRESS names (all of the framework's if none); None to drop it."""
    named = set(call.get(key, {}).get("roles", []))
    if named - set(framework.roles):
        return None
    return named or set(framework.roles)


def revive(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    core.count("master/messages_revive_offers")
    roles = _roles(framework, call, "revive")
    if roles is None:
        return
    core.filters = [
        f for f in core.filters if not (f.framework_id == framework.id and f.role in roles)
    ]
    framework.suppressed -= roles
    core.allocate_now = True


def suppress(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    core.count("master/messages_suppress_offers")
    roles = _roles(framework, call, "suppress")
    if roles is not None:
        framework.suppressed |= roles


def _grace(policy: dict[str, Any] | None) -> float | None:
    if policy and "grace_period" in policy:
        return policy["grace_period"]["nanoseconds"] / 1e9
    return None


def _kill(core: MasterCore, framework: Framework, task: Task, grace: float) -> None:
    if task.terminal:
        return
    if task.state == "TASK_STAGING" and core.cancel_launch(task):
        core.master_update(framework, task.task_id, "TASK_KILLED",
                           reason="REASON_TASK_KILLED_DURING_LAUNCH",
                           message="Killed before delivery to the agent", agent_id=task.agent_id,
                           task=task)  # fmt: skip
        return
    local = core.local[task.agent_id]
    first = local.is_running(framework.id, task.task_id) and task.state != "TASK_KILLING"
    if local.kill(framework.id, task.task_id, grace) and first and (
        "TASK_KILLING_STATE" in framework.capabilities
    ):
        core.agent_update(task, "TASK_KILLING")


def kill(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    body = call["kill"]
    core.count("master/messages_kill_task")
    task = framework.tasks.get(body["task_id"]["value"])
    if task is None:
        # An unknown task is reconciled instead (Master::kill).
        reconcile(core, framework, {"reconcile": {"tasks": [body]}}, count=False)
        return
    grace = _grace(body.get("kill_policy"))
    if grace is None:
        grace = _grace(task.info.get("kill_policy"))
    _kill(core, framework, task, DEFAULT_KILL_GRACE_S if grace is None else grace)


def shutdown(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    # A command task's executor id is its task id.
    task = framework.tasks.get(call["shutdown"]["executor_id"]["value"])
    if task is not None:
        _kill(core, framework, task, DEFAULT_KILL_GRACE_S)


def acknowledge(core: MasterCore, framework: Framework, call: dict[str, Any]) -> None:
    core.acknowledge(framework, call["acknowledge"])


def reconcile(core: MasterCore, framework: Framework, call: dict[str, Any],
              count: bool = True) -> None:  # fmt: skip
    if count:
        core.count("master/messages_reconcile_tasks")
    wanted = call["reconcile"].get("tasks", [])
    if not wanted:
        for task in list(framework.tasks.values()):
            _latest(core, framework, task)
        return
    for entry in wanted:
        task = framework.tasks.get(entry["task_id"]["value"])
        if task is not None:
            _latest(core, framework, task)
            continue
        agent_id = entry.get("agent_id", {}).get("value")
        known_agent = agent_id is not None and agent_id in core.agents
        if known_agent and core.agents[agent_id].active:
            state = "TASK_GONE" if framework.partition_aware else "TASK_LOST"
            message = "Reconciliation: Task is unknown to the agent"
        else:
            state = "TASK_UNKNOWN" if framework.partition_aware else "TASK_LOST"
            message = "Reconciliation: Task is unknown"
        core.master_update(framework, entry["task_id"]["value"], state,
                           reason="REASON_RECONCILIATION", message=message,
                           agent_id=agent_id)  # fmt: skip


def _latest(core: MasterCore, framework: Framework, task: Task) -> None:
    core.master_update(framework, task.task_id, task.state, reason="REASON_RECONCILIATION",
                       message="Reconciliation: Latest task state", agent_id=task.agent_id)


def reconcile_operations(core: MasterCore, framework: Framework,
                         call: dict[str, Any]) -> wire.Answer:  # fmt: skip
    return wire.Answer.json({"type": "RECONCILE_OPERATIONS", "reconcile_operations": {}})


def update_framework(core: MasterCore, framework: Framework,
                     call: dict[str, Any]) -> wire.Answer:  # fmt: skip
    body = call["update_framework"]
    info = dict(body["framework_info"])
    if info.get("id", {}).get("value") != framework.id:
        return wire.Answer.text(
            400, "'framework_id' differs from 'update_framework.framework_info.id'"
        )
    suppressed = list(body.get("suppressed_roles", []))
    problem = framework_problem(info, suppressed)
    if problem is not None:
        return wire.Answer.text(400, problem)
    framework.info = info
    framework.suppressed = set(suppressed)
    for offer in [o for o in core.offers.values() if o.framework_id == framework.id]:
        if offer.role not in framework.roles:
            core.rescind(offer.id)
    core.allocate_now = True
    return wire.Answer(200)


HANDLERS: dict[str, Handler] = {
    "TEARDOWN": teardown, "ACCEPT": accept, "DECLINE": decline, "REVIVE": revive,
    "SUPPRESS": suppress, "KILL": kill, "SHUTDOWN": shutdown, "ACKNOWLEDGE": acknowledge,
    "RECONCILE": reconcile, "RECONCILE_OPERATIONS": reconcile_operations,
    "UPDATE_FRAMEWORK": update_framework,
}  # fmt: skip
