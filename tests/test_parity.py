"""Simulation and live mean the same thing: a batch's group weight is a role weight in both,
and the same batch gives the same grants through the simulator and through the broker."""

from __future__ import annotations

import pytest
from support.broker import RecordingBackend, request
from support.instances import DEMAND, two_roles

from allocator.broker.core import Broker
from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import parse_batch
from allocator.scenarios.cluster_file import agent_infos
from allocator.sim.batch_sim import BatchSimulator


def test_role_weight_shares_an_agent_two_to_one():
    """Hand-computed: one 30-cpu agent, equal 1-cpu demands, roles a (weight 2) and b: DRF at
    role level gives a 20 tasks and b 10. A tenant weight with no role weight does not."""

    def fill(config: EngineConfig, weight_a: float = 1.0) -> dict[str, int]:
        engine = Engine(("cpus", "mem"), config)
        engine.add_agent("s", {"cpus": 30, "mem": 300})
        engine.register("fa", {"cpus": 1, "mem": 1}, role="a", weight=weight_a)
        engine.register("fb", {"cpus": 1, "mem": 1}, role="b")
        for name in ("fa", "fb"):
            engine.set_target(name, 100)
        grants = engine.allocate(0.0)
        return {f: sum(g.tasks for g in grants if g.framework == f) for f in ("fa", "fb")}

    assert fill(EngineConfig("drf", role_weights={"a": 2})) == {"fa": 20, "fb": 10}
    assert fill(EngineConfig("drf"), weight_a=2.0) == {"fa": 15, "fb": 15}


def _first_run_in_simulation(spec, config: EngineConfig) -> list[tuple[str, str]]:
    simulator = BatchSimulator(spec, config)
    runs: list[list[tuple[str, str]]] = []
    allocate = simulator.engine.allocate

    def recording(now: float, *args, **kwargs):
        grants = allocate(now, *args, **kwargs)
        if grants:
            runs.append([(g.framework, g.agent) for g in grants for _ in range(g.tasks)])
        return grants

    simulator.engine.allocate = recording  # type: ignore[method-assign]
    simulator.run()
    return runs[0]


def _first_run_live(spec, config: EngineConfig, jobs: list[str]) -> list[tuple[str, str]]:
    """What `fairbroker batch` does: the batch's group weights as the broker's role weights,
    each job a tenant of weight 1 in its group (the live runner's registration)."""
    backend = RecordingBackend(agents=agent_infos(spec.agents))
    broker = Broker(backend, config.with_default_role_weights(spec.role_weights()))
    broker.start(loop=False)
    executors = {g.name: g.executors for g in spec.groups}
    for job in jobs:
        group = job.split("-")[0]
        broker.register(request(job, DEMAND, target=executors[group], group=group))
    broker.allocate_once()
    return [(s.tenant_id, s.agent) for s in backend.launched]


@pytest.mark.parametrize("scheduler", ["drf", "psdsf", "rpsdsf", "bfdrf"])
@pytest.mark.parametrize("weights", [{"pi": 2.0, "wc": 1.0}, {"pi": 1.0, "wc": 3.0}])
def test_same_batch_same_grants_in_simulation_and_live(scheduler, weights):
    spec = parse_batch(two_roles(weights))
    config = EngineConfig(scheduler, seed=3)
    simulated = _first_run_in_simulation(spec, config)
    jobs = list(dict.fromkeys(f for f, _ in simulated))
    live = _first_run_live(spec, config, sorted(jobs))
    assert live == simulated
    # and the weight shows: the heavier group holds more executors after the run
    heavy = max(weights, key=weights.get)
    count = {g: sum(1 for f, _ in live if f.startswith(g)) for g in weights}
    assert count[heavy] > min(count.values())
