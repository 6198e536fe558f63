"""The policy registries (allocator/policy/registry.py): every scheduler's criterion and every
selection is registered by name, and each is built from its own parameters."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from support.instances import make_cluster

from allocator.engine_config import EngineConfig
from allocator.errors import ScenarioError
from allocator.policy import CRITERIA, SCHEDULERS, SELECTIONS, Selection, scheduler
from allocator.policy.alpha_psdsf import AlphaParams, AlphaPSDSF
from allocator.policy.fuga import FugaParams, FugaSelector
from allocator.policy.registry import Registry
from allocator.policy.selection import (
    AgentPass,
    FrameworkFirst,
    Joint,
    RandomAgent,
    RandomizedRoundRobin,
    make_selector,
)
from allocator.policy.tsf import TSF
from allocator.state import AllocationState


def _state() -> AllocationState:
    return AllocationState(make_cluster([[4, 8], [6, 4]], [[1, 2], [2, 1]]))


def test_every_selection_and_every_schedulers_criterion_is_registered():
    assert sorted(SELECTIONS.names()) == sorted(s.value for s in Selection)
    assert {s.criterion_name for s in SCHEDULERS.values()} == set(CRITERIA.names())
    assert len(SCHEDULERS) == 8  # the package docstring counts them
    for name, chosen in SCHEDULERS.items():
        criterion = chosen.criterion()
        assert criterion.name == chosen.criterion_name, name
        assert criterion is not chosen.criterion()  # a fresh one per call (TSF caches)
    assert isinstance(scheduler("tsf").criterion(), TSF)


@pytest.mark.parametrize(
    ("selection", "agent_pass", "kind", "best"),
    [
        ("random", False, RandomAgent, None),
        ("rrr", False, RandomizedRoundRobin, None),
        ("rrr", True, AgentPass, None),
        ("joint", False, Joint, None),
        ("bestfit", False, FrameworkFirst, True),
        ("firstfit", False, FrameworkFirst, False),
    ],
)
def test_each_selection_builds_its_selector(selection, agent_pass, kind, best):
    state = _state()
    selector = make_selector(
        selection, state, scheduler("drf").criterion(), np.random.default_rng(0),
        agent_pass=agent_pass,
    )  # fmt: skip
    assert type(selector) is kind
    if best is not None:
        assert selector.best is best


def test_fuga_selection_is_built_with_its_own_parameters():
    params = {"fuga": FugaParams(k=2, lam=0.5), "other": object()}
    fuga = scheduler("fuga").criterion()
    selector = make_selector("fuga", _state(), fuga, np.random.default_rng(0), params=params)
    assert isinstance(selector, FugaSelector) and selector.params == FugaParams(k=2, lam=0.5)
    # K and lambda have no default outside EngineConfig: without them it is a one-line error.
    with pytest.raises(ScenarioError, match=r"^selection fuga: needs its parameters \(FugaParams"):
        make_selector("fuga", _state(), scheduler("fuga").criterion(), np.random.default_rng(0))
    with pytest.raises(TypeError, match="must be FugaParams, got AlphaParams"):
        make_selector("fuga", _state(), scheduler("fuga").criterion(), np.random.default_rng(0),
                      params={"fuga": AlphaParams()})  # fmt: skip


def test_alpha_psdsf_is_built_with_its_alpha_and_checks_it():
    assert scheduler("alpha-psdsf").criterion().alpha == 3.0  # AlphaParams' default
    built = scheduler("alpha-psdsf").criterion({"alpha-psdsf": AlphaParams(1.5)})
    assert isinstance(built, AlphaPSDSF) and built.alpha == 1.5
    # The DRF criterion takes no parameters and ignores the others'.
    assert scheduler("drf").criterion({"alpha-psdsf": AlphaParams(1.5)}).name == "drf"
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="alpha: must be a positive finite number"):
            AlphaParams(bad)


def test_unknown_names_and_double_registration_are_errors():
    with pytest.raises(ScenarioError, match=r"^selection: unknown 'bestfitt' .*\(did you mean"):
        SELECTIONS.plugin("bestfitt")
    with pytest.raises(ScenarioError, match=r"^criterion: unknown 'dfr'"):
        CRITERIA.build("dfr")
    with pytest.raises(ValueError, match="'drf' is registered twice"):
        CRITERIA.register("drf")(TSF)


def test_a_plugin_gets_the_parameters_under_its_name_and_its_context():
    @dataclass(frozen=True)
    class Scale:
        factor: float = 2.0

    registry: Registry[float] = Registry("toy")
    registry.register("scaled", Scale)(lambda params, x: params.factor * x)
    registry.register("plain")(lambda x: x + 1)
    given = {"scaled": Scale(3.0), "plain": Scale(10.0)}
    assert registry.build("scaled", given, 5.0) == 15.0
    assert registry.build("scaled", None, 5.0) == 10.0  # its parameters' defaults
    assert registry.build("plain", given, 5.0) == 6.0  # takes none: given ones are not its
    assert registry.names() == ("scaled", "plain")


def _engine_grants(config: EngineConfig) -> dict[tuple[str, str], int]:
    """One allocation run of the Paper 000 example (allocator/data/paper000-example.yaml) in
    the online engine."""
    from allocator.engine import Engine

    engine = Engine(("cpus", "mem", "bw"), config)
    engine.add_agent("s1", {"cpus": 12, "mem": 4, "bw": 75}, {"network": "yes"})
    engine.add_agent("s2", {"cpus": 8, "mem": 16, "bw": 0})
    network = {"network": "yes"}
    engine.register("u1", {"cpus": 1, "mem": 1, "bw": 5}, target=100, constraints=network)
    engine.register("u2", {"cpus": 1, "mem": 1 / 3, "bw": 5}, target=100, constraints=network)
    engine.register("u3", {"cpus": 0.25, "mem": 1}, target=100)
    engine.register("u4", {"cpus": 0.25, "mem": 1}, target=100)
    grants: dict[tuple[str, str], int] = {}
    for grant in engine.allocate(0.0):
        key = (grant.framework, grant.agent)
        grants[key] = grants.get(key, 0) + grant.tasks
    return grants


def test_the_engine_decides_with_its_configs_fuga_parameters():
    """K reaches FUGA's selection in the engine: on this instance K = 1 places executors
    differently from K = 3, and the same K gives the same grants whatever else differs."""
    flat = EngineConfig.flat("fuga")
    one, three = _engine_grants(flat.replace(fuga_k=1)), _engine_grants(flat)
    assert one != three
    assert _engine_grants(flat.replace(fuga_k=1)) == one
    assert sum(three.values()) > 0
