"""One allocation cycle of the hierarchical allocator's second stage (no quota, no reservations).

Agents are shuffled; for each agent, roles and then the frameworks inside a role are taken in
DRF order (dominant share of what they hold on the whole cluster, recomputed per agent), and
the agent's whole allocatable remainder goes to the first framework that is active, not
suppressed in that role, and not refused by a filter the remainder fits inside
(`RefusedOfferFilter`). A remainder that meets no `min_allocatable_resources` set is kept.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from . import resources as res
from .state import Agent, Filter, Framework, Offer, Task


@dataclass
class Grant:
    framework: Framework
    role: str
    agent: Agent
    resources: res.Millis


def _share(held: Mapping[str, int], total: Mapping[str, int]) -> float:
    return max((held.get(n, 0) / t for n, t in total.items() if t > 0), default=0.0)


def filtered(filters: list[Filter], framework: Framework, role: str, agent: Agent,
             offered: res.Millis, now: float) -> bool:  # fmt: skip
    return any(
        f.framework_id == framework.id and f.role == role and f.agent_id == agent.id
        and f.expires > now and res.contains(f.resources, offered)
        for f in filters
    )  # fmt: skip


def allocate(
    agents: list[Agent],
    frameworks: list[Framework],
    offers: list[Offer],
    tasks: list[Task],
    filters: list[Filter],
    now: float,
    rng: random.Random,
) -> list[Grant]:
    live = [a for a in agents if a.active]
    cluster: res.Millis = {}
    for agent in live:
        cluster = res.add(cluster, agent.total)
    # What each (framework, role) holds, and what is left on each agent.
    held: dict[tuple[str, str], res.Millis] = {}
    available = {a.id: dict(a.total) for a in live}
    for agent_id, fid, role, amount in [
        *((t.agent_id, t.framework_id, t.role, t.resources) for t in tasks),
        *((o.agent_id, o.framework_id, o.role, o.resources) for o in offers),
    ]:
        held[(fid, role)] = res.add(held.get((fid, role), {}), amount)
        if agent_id in available:
            available[agent_id] = res.subtract(available[agent_id], amount)
    candidates = [f for f in frameworks if f.active and f.connected and not f.removed]
    roles = sorted({role for f in candidates for role in f.roles})
    grants: list[Grant] = []
    rng.shuffle(live)
    for agent in live:
        remainder = available[agent.id]
        if not res.allocatable(remainder):
            continue

        def role_share(role: str) -> float:
            total: res.Millis = {}
            for (_fid, r), amount in held.items():
                if r == role:
                    total = res.add(total, amount)
            return _share(total, cluster)

        granted = False
        for role in sorted(roles, key=lambda r: (role_share(r), r)):
            members = [f for f in candidates if role in f.roles]
            members.sort(key=lambda f, r=role: (_share(held.get((f.id, r), {}), cluster), f.id))
            for framework in members:
                if role in framework.suppressed:
                    continue
                if filtered(filters, framework, role, agent, remainder, now):
                    continue
                grants.append(Grant(framework, role, agent, remainder))
                key = (framework.id, role)
                held[key] = res.add(held.get(key, {}), remainder)
                granted = True
                break
            if granted:
                break
    return grants
