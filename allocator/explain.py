"""Why a framework waits (issue 26): derived on request from the engine's state, never logged
per grant, so it costs nothing while nobody asks.

For one framework at `now`: its demand, target, running tasks and fair share; the criterion
value that orders it and its rank among the frameworks that want more (at role level its
role's rank first); and for every agent the first reason, in this order, why it gets no task
there:

- `constraint`: a placement constraint the agent does not meet (which attribute);
- `resting`: the caller's rest on that agent after failures (the broker's), until when;
- `limit`: the framework holds its target;
- `refused`: a refuse filter (the rest of an offer it declined, a reclaim's hold), until when;
- `full`: one more task does not fit in what is free (what is missing);
- `waiting_turn`: it fits, but another framework is strictly poorer and is served first.

An agent where the framework would be served next, or ties for it (ties are broken at
random), has no reason and is not listed. The broker adds the events (grants, reclaims) from
its own records.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from allocator.policy import scheduler
from allocator.policy.levels import Level
from allocator.policy.ties import RELATIVE_TIE

if TYPE_CHECKING:
    from allocator.engine import Engine
    from allocator.state import AllocationState

#: The reasons, in the order they are checked (docs/architecture.md says where each is from).
REASONS = ("constraint", "resting", "limit", "refused", "full", "waiting_turn")


@dataclass(frozen=True)
class AgentReason:
    agent: str
    reason: str
    detail: str


@dataclass(frozen=True)
class CriterionRank:
    name: str
    value: float
    detail: str
    rank: int  # 1 = served first; 0: not wanting more
    of: int  # frameworks (or roles) wanting more
    ahead: str | None  # who is served before it, and why


@dataclass(frozen=True)
class Explanation:
    tenant: str
    held: int
    wants: int
    fair_share: int | None
    demand: dict[str, float]
    criterion: CriterionRank
    waiting: list[AgentReason]
    role: CriterionRank | None = None
    events: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        return render(self.as_dict())


def render(data: Mapping[str, Any]) -> str:
    """An explanation as text, from its dict form (`Explanation.as_dict()`, or the broker's
    `Explanation` message as a dict with its field names)."""
    share = data.get("fair_share")
    share_text = "not computed yet" if share is None or share < 0 else str(share)
    demand = ", ".join(f"{r} {_amount(v)}" for r, v in data.get("demand", {}).items() if v)
    lines = [
        f"tenant {data['tenant']}: holds {data.get('held', 0)}, wants {data.get('wants', 0)}, "
        f"fair share {share_text} (executor: {demand})"
    ]
    for level in ("role", "criterion"):
        rank = data.get(level)
        if not rank:
            continue
        place = (
            f"rank {rank['rank']} of {rank.get('of', 0)}" if rank.get("rank") else "wants no more"
        )
        lines.append(
            f"  {'group' if level == 'role' else 'tenant'}: {rank.get('name', '')} "
            f"{rank.get('value', 0.0):.4g} ({rank.get('detail', '')}); {place}"
        )
        if rank.get("ahead"):
            lines.append(f"    served before it: {rank['ahead']}")
    waiting = data.get("waiting", [])
    if waiting:
        lines.append("  agents where it gets nothing:")
        width = max(len(item["agent"]) for item in waiting)
        for item in waiting:
            lines.append(f"    {item['agent']:<{width}}  {item['reason']:<12}  {item['detail']}")
    else:
        lines.append("  no agent holds it back")
    events = data.get("events", [])
    if events:
        lines.append("  recent events (newest first):")
    for event in events:
        when = time.strftime("%H:%M:%S", time.localtime(event.get("time", 0.0)))
        lines.append(
            f"    {when} {event.get('kind', '')} executor {event.get('executor_id', '')} on "
            f"{event.get('agent', '')}: {event.get('rule', '')}"
        )
    return "\n".join(lines)


def explain(
    engine: Engine,
    framework: str,
    now: float,
    fair_share: Mapping[str, int] | None = None,
    rests: Mapping[str, float] | None = None,
) -> Explanation:
    """Why `framework` gets no task on each agent at `now` (see the module's docstring).
    `fair_share`: framework -> executors (`allocator.fair_share`); `rests`: agent -> until
    when the broker rests this framework there after failures (same clock as `now`)."""
    record = engine.frameworks[framework]
    state = engine.snapshot(now)
    cluster = state.cluster
    n = cluster.framework_names.index(framework)
    criterion = scheduler(engine.config.scheduler).criterion(engine.policy_params)
    values = _values(criterion, state)
    wanting = state.wanting()
    role_level = Level(engine.level) is Level.ROLE and len(cluster.role_names) > 1
    servable = state.fits_all().any(axis=1)  # frameworks that could be served now
    role_rank = _role_rank(criterion, state, n, servable) if role_level else None
    within = wanting & (cluster.role_of == cluster.role_of[n]) if role_level else wanting
    rank = _rank(
        criterion.name, values, within, servable, n, cluster.framework_names, _why(state, n)
    )
    waiting = _agent_reasons(engine, state, n, now, rests or {}, criterion, role_level)
    share = None if fair_share is None else fair_share.get(framework)
    return Explanation(
        tenant=framework,
        held=int(state.count[n]),
        wants=int(record.target),
        fair_share=None if share is None else int(share),
        demand={r: float(v) for r, v in zip(cluster.resources, record.demand, strict=True)},
        criterion=rank,
        waiting=waiting,
        role=role_rank,
    )


def _values(criterion: Any, holdings: Any) -> np.ndarray:
    """(H,) each holder's criterion; a per-agent criterion at its best (lowest) agent."""
    if criterion.per_agent:
        return np.asarray(criterion.matrix(holdings), dtype=float).min(axis=1, initial=np.inf)
    return np.asarray(criterion.values(holdings), dtype=float)


def _rank(
    name: str,
    values: np.ndarray,
    wanting: np.ndarray,
    servable: np.ndarray,
    n: int,
    names: tuple[str, ...],
    detail: str,
) -> CriterionRank:
    """Rank of holder n among the wanting holders: 1 + those strictly lower (holders tied
    with it share its rank: the allocator breaks ties at random, `policy/ties.py`), and the
    poorest strictly lower holder that can be served now (fits somewhere). Nobody is named
    for a holder that wants no more."""
    candidates = np.flatnonzero(wanting)
    order = candidates[np.lexsort((candidates, values[candidates]))]
    below = _below(values, values[n])
    rank = int((below & wanting).sum()) + 1 if wanting[n] else 0
    first = next((int(h) for h in order if servable[h] and below[h]), None)
    ahead = None
    if first is not None and wanting[n]:
        ahead = f"{names[first]} ({name} {values[first]:.4g} < {values[n]:.4g})"
    return CriterionRank(name, float(values[n]), detail, rank, int(order.size), ahead)


def _below(values: np.ndarray, value: np.ndarray | float) -> np.ndarray:
    """Which values are lower than `value` (broadcast) by more than the allocator's tie
    margin (`policy.ties.pick_lowest` takes values that close as equal)."""
    value = np.asarray(value, dtype=float)
    finite = np.isfinite(value)
    margin = RELATIVE_TIE * np.maximum(1.0, np.abs(np.where(finite, value, 0.0)))
    return values < value - np.where(finite, margin, 0.0)


def _role_rank(
    criterion: Any, state: AllocationState, n: int, servable: np.ndarray
) -> CriterionRank:
    cluster = state.cluster
    # as the allocator orders roles (TSF computes its role level from the frameworks')
    values = np.asarray(criterion.role_column(state), dtype=float)
    wanting = np.zeros(len(cluster.role_names), dtype=bool)
    wanting[cluster.role_of[state.wanting()]] = True
    servable_roles = np.zeros_like(wanting)
    servable_roles[cluster.role_of[servable]] = True
    g = int(cluster.role_of[n])
    detail = f"group {cluster.role_names[g]}, weight {cluster.role_weight[g]:g}"
    return _rank(criterion.name, values, wanting, servable_roles, g, cluster.role_names, detail)


def _why(state: AllocationState, n: int) -> str:
    """The dominant share behind the value: e.g. "cpus 12/28.6, weight 1"."""
    total = state.cluster.total
    shares = np.divide(state.alloc[n], total, out=np.zeros_like(total), where=total > 0)
    r = int(np.argmax(shares))
    resource = state.cluster.resources[r]
    return (
        f"dominant {resource} {_amount(state.alloc[n, r])}/{_amount(total[r])}, "
        f"weight {state.cluster.weight[n]:g}"
    )


def _agent_reasons(
    engine: Engine,
    state: AllocationState,
    n: int,
    now: float,
    rests: Mapping[str, float],
    criterion: Any,
    role_level: bool,
) -> list[AgentReason]:
    cluster = state.cluster
    name = cluster.framework_names[n]
    record = engine.frameworks[name]
    demand = np.nan_to_num(cluster.demand[n], nan=0.0)
    fits = (demand[None, :] <= state.residual + state.tol).all(axis=1)
    held = int(state.count[n])
    out: list[AgentReason | int] = []  # an int: an agent where it fits, decided below
    for i, agent in enumerate(cluster.agent_names):
        if agent not in engine.agents:
            continue  # a free slot
        mismatch = _constraint_mismatch(record.constraints, engine.agents[agent].attributes)
        if mismatch is not None:
            out.append(AgentReason(agent, "constraint", mismatch))
        elif rests.get(agent, now) > now:
            out.append(AgentReason(agent, "resting", _until("after failures", rests[agent], now)))
        elif held >= record.target:
            out.append(AgentReason(agent, "limit", f"target {int(record.target)} reached"))
        elif not cluster.eligible[n, i]:  # the snapshot applied a refuse filter that holds
            out.append(AgentReason(agent, "refused", _refused(engine, name, agent, now)))
        elif not fits[i]:
            out.append(AgentReason(agent, "full", _missing(cluster.resources, demand, state, i)))
        else:
            out.append(i)
    room = np.array([i for i in out if isinstance(i, int)], dtype=np.int64)
    poorer = _served_before(criterion, state, n, room, role_level)
    return [
        item if isinstance(item, AgentReason)
        else AgentReason(cluster.agent_names[item], "waiting_turn", poorer[item])
        for item in out
        if isinstance(item, AgentReason) or item in poorer
    ]  # fmt: skip


def _constraint_mismatch(constraints: Mapping[str, object], attributes: Mapping) -> str | None:
    """The first constrained attribute the agent lacks or has another value of (as
    `allocator.model.matches_constraints` decides), described; None when it matches."""
    for key, wanted in sorted(constraints.items()):
        options = [str(o) for o in (wanted if isinstance(wanted, list) else [wanted])]
        has = attributes.get(key)
        if has is None or str(has) not in options:
            shown = "no such attribute" if has is None else f"{key}={has}"
            return f"needs {key}={'|'.join(options)}, agent has {shown}"
    return None


def _missing(resources: tuple[str, ...], demand: np.ndarray, state: AllocationState, i: int) -> str:
    free = state.residual[i]
    short = [r for r in range(len(resources)) if demand[r] > free[r] + state.tol[r]]
    needs = ", ".join(f"{resources[r]} {_amount(demand[r])}" for r in short)
    has = ", ".join(f"{resources[r]} {_amount(max(free[r], 0.0))}" for r in short)
    return f"needs {needs}; free {has}"


def _served_before(
    criterion: Any, state: AllocationState, n: int, agents: np.ndarray, role_level: bool
) -> dict[int, str]:
    """For each of `agents` (where n fits one more task), who is served before n there, as
    the allocator's agent pass picks (`Selector._framework_at`): among the frameworks that
    want more and fit there, at role level one of a strictly poorer group (by the groups'
    values at that agent), else one of n's group strictly poorer by its criterion value at
    that agent; the lowest such, named. Agents where n is served next, or ties for it (ties
    are broken at random), are left out. All agents at once: (F, agents) arrays."""
    if agents.size == 0:
        return {}
    fits = state.fits_all()[:, agents]
    rivals = fits & fits[n][None, :]
    values = np.asarray(criterion.matrix(state), dtype=float)[:, agents]
    names = state.cluster.framework_names
    role_of = state.cluster.role_of
    out: dict[int, str] = {}
    if role_level:
        groups = np.asarray(criterion.role_matrix(state), dtype=float)[:, agents][role_of]
        poorer = rivals & _below(groups, groups[n])
        lowest = np.where(poorer, groups, np.inf).min(axis=0)
        first = _first_lowest(values, poorer & (groups == lowest))
        for c in np.flatnonzero(poorer.any(axis=0)):
            f, g = int(first[c]), state.cluster.role_names[role_of[first[c]]]
            out[int(agents[c])] = (
                f"group {g} is poorer ({groups[f, c]:.4g} < {groups[n, c]:.4g}); "
                f"{names[f]} fits here"
            )
        rivals &= (role_of == role_of[n])[:, None]
    poorer = rivals & _below(values, values[n])
    first = _first_lowest(values, poorer)
    for c in np.flatnonzero(poorer.any(axis=0)):
        f = int(first[c])
        out.setdefault(
            int(agents[c]),
            f"{names[f]} is poorer ({values[f, c]:.4g} < {values[n, c]:.4g}) and fits here",
        )
    return out


def _first_lowest(values: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(C,) per column, the first (lowest slot) candidate row of the lowest value."""
    lowest = np.where(candidates, values, np.inf).min(axis=0)
    return np.argmax(candidates & (values == lowest), axis=0)


def _refused(engine: Engine, framework: str, agent: str, now: float) -> str:
    """A refuse filter: the rest of an offer the framework declined (oblivious mode; it
    holds while the agent has no more free than that), or one set by `Engine.refuse`."""
    until = engine.filters.get((framework, agent), now)
    declined = engine.declined.get((framework, agent))
    if declined is None:
        return _until("refuse filter", until, now)
    amounts = ", ".join(
        f"{r} {_amount(v)}" for r, v in zip(engine.resources, declined, strict=True) if v > 0
    )
    return _until(f"declined {amounts} of an offer; refuse filter", until, now)


def _until(what: str, until: float, now: float) -> str:
    return f"{what}, {until - now:.1f} s left"


def _amount(value: float) -> str:
    return f"{value:.6g}"
