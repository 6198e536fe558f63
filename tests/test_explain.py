"""`allocator.explain`: why a framework gets no task on each agent, and what orders it, on
hand-built engines (the broker's and the simulator's answers come from the same function)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.explain import REASONS, explain
from allocator.fair_share import fair_shares
from allocator.policy import scheduler as scheduler_of
from allocator.policy.ties import RELATIVE_TIE

SLOT = {"cpus": 1.0, "mem": 512.0}


def three_agents(**config: object) -> Engine:
    """4, 8 and 6 cpus with 4 GiB each; a1 is of type t1, the others t2."""
    engine = Engine(("cpus", "mem"), EngineConfig("drf", level="framework", **config))
    for name, cpus, kind in (("a1", 4, "t1"), ("a2", 8, "t2"), ("a3", 6, "t2")):
        engine.add_agent(name, {"cpus": cpus, "mem": 4096}, {"type": kind})
    return engine


def reasons(explanation) -> dict[str, str]:
    return {item.agent: item.reason for item in explanation.waiting}


def test_a_constrained_tenant_behind_a_full_cluster():
    """A fills the 18 cpus; C may use t1 agents only: constraint on a2 and a3, full on a1,
    and its fair share above what it holds. By hand (DRF from an empty cluster, Mesos's
    agent pass: a1 filled first, ties to the tenant registered first): on a1 A, C, A, C;
    then a2 and a3 for A alone: C 2, A 2 + 8 + 6 = 16."""
    engine = three_agents()
    engine.register("A", SLOT, target=100)
    engine.allocate(0.0)
    engine.register("C", SLOT, target=10, constraints={"type": "t1"})
    fair = fair_shares(engine).as_dict()
    answer = explain(engine, "C", 1.0, fair)
    assert reasons(answer) == {"a1": "full", "a2": "constraint", "a3": "constraint"}
    details = {item.agent: item.detail for item in answer.waiting}
    assert details["a2"] == "needs type=t1, agent has type=t2"
    assert details["a1"] == "needs cpus 1; free cpus 0"
    assert (answer.held, answer.wants, answer.fair_share) == (0, 10, 2)
    assert fair["A"] == 16
    assert answer.criterion.value == 0 and answer.criterion.rank == 1
    assert answer.criterion.of == 2  # A wants more too
    text = answer.text()
    assert "constraint" in text and "needs type=t1" in text and "fair share 2" in text


def test_the_dominant_share_and_rank_of_the_richer_tenant():
    engine = three_agents()
    engine.register("A", SLOT, target=100)
    engine.allocate(0.0)
    engine.register("B", SLOT, target=100)
    engine.release("A", "a2", 3)  # 3 cpus free on a2: B is poorer and fits there
    answer = explain(engine, "A", 1.0)
    assert answer.criterion.detail == "dominant cpus 15/18, weight 1"
    assert answer.criterion.value == pytest.approx(15 / 18)
    assert (answer.criterion.rank, answer.criterion.of) == (2, 2)
    assert answer.criterion.ahead.startswith("B (drf 0 < 0.8333")
    assert reasons(answer) == {"a1": "full", "a2": "waiting_turn", "a3": "full"}
    assert "B is poorer" in {i.agent: i.detail for i in answer.waiting}["a2"]
    # B itself is first wherever it fits: a2 is not listed for it
    assert reasons(explain(engine, "B", 1.0)) == {"a1": "full", "a3": "full"}


def test_limit_refused_and_resting():
    engine = three_agents(refuse_seconds=5.0)
    engine.register("A", SLOT, target=2)
    engine.allocate(0.0)
    assert set(reasons(explain(engine, "A", 0.0)).values()) == {"limit"}
    engine.register("B", SLOT, target=3)
    engine.refuse("B", "a3", until=10.0)
    answer = explain(engine, "B", 4.0)
    assert reasons(answer) == {"a3": "refused"}
    assert answer.waiting[0].detail == "refuse filter, 6.0 s left"
    assert reasons(explain(engine, "B", 11.0)) == {}  # expired: nothing holds it back
    rested = explain(engine, "B", 4.0, rests={"a1": 64.0, "a3": 2.0})
    assert reasons(rested) == {"a1": "resting", "a3": "refused"}  # a3's rest is over
    assert "60.0 s left" in rested.waiting[0].detail


def test_role_level_names_the_poorer_group():
    engine = Engine(("cpus", "mem"), EngineConfig("drf", level="role"))
    engine.add_agent("s", {"cpus": 4, "mem": 4096})
    engine.register("x", SLOT, role="etl", target=100)
    engine.allocate(0.0)
    engine.register("y", SLOT, role="ml", target=100)
    engine.register("z", SLOT, role="etl", target=100)
    engine.release("x", "s", 2)
    answer = explain(engine, "z", 1.0)
    assert answer.role is not None and answer.role.rank == 2
    assert answer.role.ahead.startswith("ml (drf 0 < 0.5")
    assert reasons(answer) == {"s": "waiting_turn"}
    assert answer.waiting[0].detail.startswith("group ml is poorer")


def test_a_tie_holds_nobody_back():
    """x and y hold one task each on a 4-cpu agent (DRF 0.25 both): the allocator breaks
    the tie at random (`policy/ties.py`), so neither waits its turn behind the other, both
    rank first and nobody is named as served before either."""
    engine = Engine(("cpus", "mem"), EngineConfig("drf", level="framework"))
    engine.add_agent("s", {"cpus": 4, "mem": 4096})
    engine.register("x", SLOT, target=1)
    engine.allocate(0.0)
    engine.register("y", SLOT, target=1)
    engine.allocate(0.0)
    engine.set_target("x", 10)
    engine.set_target("y", 10)
    for name in ("x", "y"):
        answer = explain(engine, name, 1.0)
        assert reasons(answer) == {}, (name, answer.waiting)
        assert answer.criterion.value == pytest.approx(0.25)
        assert (answer.criterion.rank, answer.criterion.of, answer.criterion.ahead) == (1, 2, None)


def test_tsf_at_role_level():
    """TSF's role level is the sum of its frameworks' task shares x_n / y_n over the role's
    weight (`TSF.role_column`), not TSF of the role's summed holdings. Agent s: 4 cpus, so
    y_n = 4 tasks alone for a 1-cpu task; x (etl) holds 2: etl 2/4 = 0.5, ml 0."""
    engine = Engine(("cpus", "mem"), EngineConfig("tsf", level="role"))
    engine.add_agent("s", {"cpus": 4, "mem": 4096})
    engine.register("x", SLOT, role="etl", target=2)
    engine.allocate(0.0)
    engine.register("y", SLOT, role="ml", target=100)
    engine.register("z", SLOT, role="etl", target=100)
    answer = explain(engine, "z", 1.0)
    assert answer.role is not None
    assert (answer.role.value, answer.role.rank, answer.role.of) == (0.5, 2, 2)
    assert answer.role.ahead == "ml (tsf 0 < 0.5)"
    assert reasons(answer) == {"s": "waiting_turn"}
    assert answer.waiting[0].detail == "group ml is poorer (0 < 0.5); y fits here"
    assert reasons(explain(engine, "y", 1.0)) == {}


def test_refused_after_an_oblivious_decline():
    """Oblivious mode: T is offered all of a 5-cpu agent, keeps 2 tasks of 2 cpus and
    declines the rest, cpus 1 and mem 2048: a refuse filter for max(refuse 5 s, interval
    1 s), which explain names with what was declined; once it expires the agent is `full`."""
    engine = Engine(("cpus", "mem"), EngineConfig("drf", mode="oblivious", level="framework"))
    engine.add_agent("a", {"cpus": 5, "mem": 4096})
    engine.register("T", {"cpus": 2.0, "mem": 1024.0}, target=3)
    grants = engine.allocate(0.0)
    assert [(g.agent, g.tasks) for g in grants] == [("a", 2)]
    answer = explain(engine, "T", 1.5)
    assert reasons(answer) == {"a": "refused"}
    assert answer.waiting[0].detail == (
        "declined cpus 1, mem 2048 of an offer; refuse filter, 3.5 s left"
    )
    later = explain(engine, "T", 5.0)
    assert [(w.reason, w.detail) for w in later.waiting] == [("full", "needs cpus 2; free cpus 1")]


def test_every_reason_is_documented():
    """docs/architecture.md's table has one row per reason, in the order they are checked."""
    text = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text()
    section = text.split("## Why a tenant waits", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE)
    assert tuple(rows) == REASONS


@pytest.mark.parametrize("scheduler", ["drf", "psdsf", "tsf"])
@pytest.mark.parametrize("level", ["framework", "role"])
def test_waiting_turn_against_a_brute_force_reading(scheduler: str, level: str) -> None:
    """On random engines, every agent where a tenant fits is checked one at a time, as the
    agent pass reads it (`Criterion.column` / `role_column` at that agent, the selector's
    own `fits_agent`): waiting_turn exactly where some tenant that fits there is strictly
    poorer (its group first at role level), naming one of those; not listed elsewhere."""
    rng = np.random.default_rng(7)
    for trial in range(6):
        engine = Engine(("cpus", "mem"), EngineConfig(scheduler, level=level, seed=trial))
        for i in range(8):
            engine.add_agent(f"a{i}", {"cpus": float(rng.integers(2, 9)), "mem": 4096.0})
        for k in range(6):
            demand = {"cpus": float(rng.integers(1, 3)), "mem": float(rng.choice([256, 1024]))}
            engine.register(f"t{k}", demand, role=f"g{k % 3}", target=int(rng.integers(1, 8)))
            engine.allocate(float(k))
        for k in range(6):
            engine.set_target(f"t{k}", 100)
        state = engine.snapshot(10.0)
        criterion = scheduler_of(scheduler).criterion(engine.policy_params)
        cluster = state.cluster
        role_level = level == "role" and len(cluster.role_names) > 1
        for k in range(6):
            n = cluster.framework_names.index(f"t{k}")
            answer = {w.agent: w for w in explain(engine, f"t{k}", 10.0).waiting}
            for i, agent in enumerate(cluster.agent_names):
                fits = state.fits_agent(i)
                if not fits[n]:
                    continue
                values = criterion.column(state, i)
                rivals = [int(f) for f in np.flatnonzero(fits)]
                if role_level:
                    groups = criterion.role_column(state, i)[cluster.role_of]
                    margin = RELATIVE_TIE * max(1.0, abs(groups[n]))
                    ahead = [f for f in rivals if groups[f] < groups[n] - margin]
                    if not ahead:
                        rivals = [f for f in rivals if cluster.role_of[f] == cluster.role_of[n]]
                if not role_level or not ahead:
                    margin = RELATIVE_TIE * max(1.0, abs(values[n]))
                    ahead = [f for f in rivals if values[f] < values[n] - margin]
                if not ahead:
                    assert agent not in answer, (trial, k, agent, answer[agent])
                    continue
                assert answer[agent].reason == "waiting_turn", (trial, k, agent)
                named = answer[agent].detail.split("; ")[-1].split(" ")[0]
                assert cluster.framework_names.index(named) in ahead, answer[agent].detail
