"""Faults a test can inject into the master: fail-over to a new leader and a lost agent.

(Cutting a stream is `MasterCore.disconnect`, rescinding an offer `MasterCore.rescind`, and
answering a call with an error `MasterCore.inject`.)
"""

from __future__ import annotations

import time
import uuid

from . import events
from .core import MasterCore


def fail_over(core: MasterCore) -> str:
    """A new leading master: new id, streams cut, offers and filters forgotten."""
    with core.lock:
        core.master_id = str(uuid.uuid4())
        core.elected_time = time.time()
        core.offers.clear()
        core.filters.clear()
        now = time.time()
        for framework in core.frameworks.values():
            if framework.removed:
                continue
            if framework.subscription is not None:
                framework.subscription.drop()
                framework.subscription = None
            framework.connected = framework.active = False
            framework.recovered = True
            framework.suppressed.clear()
            framework.failover_deadline = now + framework.failover_timeout
        return core.master_id


def lose_agent(core: MasterCore, name: str) -> str:
    """The agent is removed as unreachable: RESCIND, TASK_LOST (or UNREACHABLE), FAILURE."""
    with core.lock:
        agent = core.agent_named(name)
        agent.active = False
        core.local[agent.id].lose()
        for offer in [o for o in core.offers.values() if o.agent_id == agent.id]:
            del core.offers[offer.id]
            framework = core.frameworks[offer.framework_id]
            framework.count("offers/rescinded")
            core.send(framework, events.rescind(offer.id))
        core.filters = [f for f in core.filters if f.agent_id != agent.id]
        for framework in core.frameworks.values():
            for task in [t for t in framework.tasks.values() if t.agent_id == agent.id]:
                core.cancel_launch(task)
                if task.terminal:
                    task.pending.clear()
                    core.complete(framework, task)
                    continue
                state = "TASK_UNREACHABLE" if framework.partition_aware else "TASK_LOST"
                core.master_update(
                    framework, task.task_id, state, reason="REASON_SLAVE_REMOVED",
                    message=f"Agent {agent.hostname} is unreachable", agent_id=agent.id,
                    task=task,
                )  # fmt: skip
                if state == "TASK_UNREACHABLE":
                    task.resources_released = True
                    core.complete(framework, task)
        for framework in core.frameworks.values():
            if not framework.removed:
                core.send(framework, events.failure(agent.id))
        return agent.id
