"""The `Explain` call's answer: `allocator.explain` on the broker's engine, with the events
from the broker's own records (its tenants' executors, the reclaimer's recent decisions), and
a `refused` agent the tenant is kept off after a reclaim named as such."""

from __future__ import annotations

from collections.abc import Iterable

from allocator.broker.proto import pb
from allocator.broker.tenants import Tenant
from allocator.engine_config import EngineConfig
from allocator.explain import CriterionRank, Explanation
from allocator.reclaim import Reclaim

#: Events shown per tenant, newest first.
MAX_EVENTS = 20


def explanation_message(
    answer: Explanation,
    tenant: Tenant,
    reclaims: Iterable[tuple[float, Reclaim]],
    config: EngineConfig,
) -> pb.Explanation:
    reclaims = list(reclaims)
    message = pb.Explanation(
        tenant=answer.tenant,
        held=answer.held,
        wants=answer.wants,
        fair_share=-1 if answer.fair_share is None else answer.fair_share,
        demand=answer.demand,
        criterion=_rank(answer.criterion),
        waiting=_waiting(answer, reclaims),
        events=_events(tenant, reclaims, config),
    )
    if answer.role is not None:
        message.role.CopyFrom(_rank(answer.role))
    return message


def _waiting(answer: Explanation, reclaims: list[tuple[float, Reclaim]]) -> list[pb.AgentReason]:
    """The reasons; a refuse filter the engine was given (not a decline) on an agent where
    the tenant's executor was reclaimed is the reclaim's hold (`allocator.reclaim.hold_room`:
    the victim kept off until the room has gone to the beneficiary). A failure's rest, the
    other filter given, is `resting` already."""
    taken = {d.agent: d for _, d in reclaims if d.victim == answer.tenant}  # the latest wins
    out = []
    for w in answer.waiting:
        detail = w.detail
        decision = taken.get(w.agent)
        if w.reason == "refused" and decision is not None and detail.startswith("refuse filter"):
            detail = (
                f"kept off while executor {decision.executor}, reclaimed here, makes room for "
                f"{decision.beneficiary}; {detail}"
            )
        out.append(pb.AgentReason(agent=w.agent, reason=w.reason, detail=detail))
    return out


def _rank(rank: CriterionRank) -> pb.CriterionRank:
    return pb.CriterionRank(
        name=rank.name,
        value=rank.value,
        detail=rank.detail,
        rank=rank.rank,
        of=rank.of,
        ahead=rank.ahead or "",
    )


def _events(
    tenant: Tenant, reclaims: Iterable[tuple[float, Reclaim]], config: EngineConfig
) -> list[pb.ExplainEvent]:
    rule = (
        f"{config.scheduler} {config.mode} progressive filling, "
        f"{config.effective_selection} selection, {config.level} level"
    )
    events = [
        pb.ExplainEvent(
            time=record.started_at,
            kind="grant",
            executor_id=executor_id,
            agent=record.spec.agent,
            rule=rule,
        )
        for executor_id, record in tenant.executors.items()
    ]
    for when, decision in reclaims:
        if tenant.tenant_id not in (decision.victim, decision.beneficiary):
            continue
        why = (
            f"reclaim: {decision.victim} held {decision.victim_executors} above its fair share "
            f"{decision.victim_fair_share}; {decision.beneficiary} held "
            f"{decision.beneficiary_executors} below its fair share "
            f"{decision.beneficiary_fair_share}"
        )
        kind = "reclaimed_from" if decision.victim == tenant.tenant_id else "reclaimed_for"
        events.append(
            pb.ExplainEvent(
                time=when, kind=kind, executor_id=decision.executor, agent=decision.agent, rule=why
            )
        )
    events.sort(key=lambda event: event.time, reverse=True)
    return events[:MAX_EVENTS]
