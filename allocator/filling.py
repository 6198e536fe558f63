"""Progressive filling (paper 002 Sec. III): serve the lowest criterion, one grant at a time,
until no task fits anywhere.

Characterized mode grants one task of d_n; oblivious mode hands the chosen framework the
agent's whole remainder, of which it keeps the whole tasks that fit (up to its limit).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Mapping
from itertools import repeat

import numpy as np

from allocator import native_fill
from allocator.policy import Selection, Ties
from allocator.policy.base import Criterion
from allocator.policy.levels import Level
from allocator.policy.selection import Selector, make_selector
from allocator.state import AllocationState, Grant, Mode


def _grants(frameworks: np.ndarray, agents: np.ndarray) -> list[Grant]:
    """The native fill's grants as `Grant`s; with the collector off, as none of them holds
    a reference (its collections, triggered by the many new tuples, cost more than
    building them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        rows = zip(frameworks.tolist(), agents.tolist(), repeat(1))
        return list(map(tuple.__new__, repeat(Grant), rows))
    finally:
        if enabled:
            gc.enable()


def progressive_fill(
    state: AllocationState,
    criterion: Criterion,
    selection: Selection | str,
    rng: np.random.Generator,
    ties: Ties | str = Ties.RANDOM,
    max_grants: int | None = None,
    on_grant: Callable[[Grant], None] | None = None,
    level: Level | str = Level.FRAMEWORK,
    single_offer: bool = False,
    agent_pass: bool = False,
    keep: bool = True,
    params: Mapping[str, object] | None = None,
    selector: Selector | None = None,
) -> list[Grant]:
    """Grant until nothing fits (or `max_grants`); returns the grants in order (none with
    `keep=False`, for fills too large to hold every grant: count them with `on_grant`).

    `level` role serves the lowest role first, then the lowest framework within it.
    `single_offer` (the online engine in oblivious mode): an agent whose remainder was
    offered is withheld for the rest of the run, as Mesos re-offers declined resources only
    at its next allocation run; the remainder counts toward the framework's allocation until
    the run ends. `agent_pass` (the online engine): `rrr` is Mesos's allocation pass, the
    agents shuffled once and each filled before the next. `params`: the criteria's and
    selections' parameters by name (`EngineConfig.policy_params()`; FUGA's selection needs
    its own). `selector`: the one to ask instead of the selection's own (the online
    engine's run over some agents, `allocator.engine_columns`).

    Where `native_fill.applies` (large static fills), compiled kernels make the very same
    grants; `on_grant` is then called for each after the fill, in order.
    """
    native = None
    if selector is None and native_fill.applies(
        state, criterion, selection, ties, level, agent_pass, single_offer
    ):
        native = native_fill.fill(state, criterion, selection, rng, max_grants)
    if native is not None:
        frameworks, agents = native
        if not keep and on_grant is None:
            return []
        made = _grants(frameworks, agents)
        if on_grant is not None:
            for grant in made:
                on_grant(grant)
        return made if keep else []
    if selector is None:
        selector = make_selector(selection, state, criterion, rng, ties, level, agent_pass, params)
    grants: list[Grant] = []
    made = 0
    while max_grants is None or made < max_grants:
        pick = selector.next()
        if pick is None:
            break
        framework, agent = pick
        tasks = 1 if state.mode is Mode.CHARACTERIZED else state.tasks_that_fit(framework, agent)
        grant = state.grant(framework, agent, tasks)
        made += 1
        if keep:
            grants.append(grant)
        if single_offer:
            state.withhold(agent, framework)
        if on_grant is not None:
            on_grant(grant)
    return grants
