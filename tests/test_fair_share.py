"""Fair share per framework (allocator.fair_share) on paper 002's example, hand-computed.

Paper 002 eqs. (11)-(12): s1 = (100 cpus, 30 mem), s2 = (30, 100); f1 needs (5, 1), f2
(1, 5). Every expectation below is progressive filling from an empty cluster with the
deterministic rule of `fair_share`: rrr is Mesos's allocation pass in declaration order
(s1 filled until nothing fits, then s2), ties go to the lowest slot (f1 before f2).
Table I's randomized rows average over orders; this is one order, written out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.fair_share import FairShare, FairShareCache, fair_shares
from allocator.model import Cluster
from allocator.state import Mode

S1 = {"cpus": 100, "mem": 30}
S2 = {"cpus": 30, "mem": 100}
D1 = {"cpus": 5, "mem": 1}
D2 = {"cpus": 1, "mem": 5}
UNLIMITED = 1000  # a target no agent set here can reach


def paper_engine(config: EngineConfig, **f2: object) -> Engine:
    engine = Engine(("cpus", "mem"), config)
    engine.add_agent("s1", S1, {"zone": "a"})
    engine.add_agent("s2", S2, {"zone": "b"})
    engine.register("f1", D1, target=UNLIMITED)
    engine.register("f2", D2, **{"target": UNLIMITED, **f2})
    return engine


def placed(share: FairShare) -> dict[str, list[int]]:
    return {name: list(map(int, share.by_agent[n])) for n, name in
            enumerate(share.cluster.framework_names)}  # fmt: skip


# DRF: dominant shares 5 x1/130 and 5 x2/130 are equal after each pair (f1 first on ties).
# On s1 a pair takes (6, 6): after 5 pairs (30, 30), mem is full: s1 = f1 5, f2 5. On s2
# likewise after 5 pairs (30, 30) cpus are full: s2 = f1 5, f2 5. Total 20, Table I's
# (5, 5, 5, 5) outcome.
DRF = {"f1": [5, 5], "f2": [5, 5]}
# TSF: y1 = floor(20) + floor(6) = 26 = y2, so x_n / 26 orders exactly as DRF: same fill.
TSF = DRF
# PS-DSF at s1: K1 = x1/20 (gamma 100/5), K2 = x2/6 (gamma 30/5). f1 while K1 <= K2:
# (1,0) .05 > 0 -> f2 (1,1) 1/6; f1 to (4,1) .2 > .167 -> f2 (4,2) .333; f1 to (7,2) .35
# -> f2 (7,3) .5; f1 to (10,3) .5 = .5, tie -> f1 (11,3): mem 11 + 15 = 26, f2 (5 mem) no
# longer fits; f1 alone to mem 30: (15, 3). At s2 f1's K = alloc (75, 15) / (30, 100) =
# 2.5 and f2's K = x2/20 stays below it (23/20) until mem is full: 20 more f2, residual
# (10, 0), f1 needs mem. s1 = (15, 3), s2 = (0, 20).
PSDSF = {"f1": [15, 0], "f2": [3, 20]}
# rPS-DSF on s1 (alloc over s1's residual; a zero residual is skipped):
# (1,0) res (95,29) K1 5/95 > 0 -> f2 (1,1) res (94,24) K2 5/24=.208, K1 max(5/94, 1/24)
# = .053 -> f1 (2,1) res (89,23) K1 .112 -> f1 (3,1) res (84,22) K1 .179 -> f1 (4,1) res
# (79,21) K1 max(20/79, 4/21) = .253 > K2 5/21 = .238 -> f2 (4,2) res (78,16) K2 10/16;
# f1 (5,2) .342, (6,2) .441, (7,2) .556, (8,2) .690, (9,2) res (53,11) .849 < K2 10/11
# -> f1 (10,2) res (48,10): K1 max(50/48, 10/10) = 1.042 > K2 10/10 = 1 -> f2 (10,3)
# res (47,5): K1 max(50/47, 10/5) = 2 < K2 15/5 = 3 -> f1 (11,3) res (42,4): f2 no longer
# fits; f1 to mem 30: (15,3) res (22,0).
# On s2 (30,100): f1 alloc (75,15) K1 = 75/(30-n) vs f2's (3+n, 15+5n) over (30-n, 100-5n)
# after n more f2: n=16 res (14,20) K2 95/20 = 4.75 < K1 75/14 = 5.36 -> f2; n=17 res
# (13,15) K2 100/15 = 6.67 > K1 75/13 = 5.77 -> f1, res (8,14), K1 80/8 = 10 > K2
# max(20/8, 100/14) = 7.14 -> f2 (n=18) res (7,9) K2 105/9 = 11.7 > K1 80/7 = 11.4 -> f1
# res (2,8) K1 85/2 -> f2 res (1,3); nothing fits. s2 = f1 2, f2 19.
RPSDSF = {"f1": [15, 2], "f2": [3, 19]}
# BF-DRF: DRF alternates f1, f2 (f1 first); each goes to the feasible agent of least
# H = |d_mem/d_cpu - res_mem/res_cpu| (ref cpus, totals equal): f1 (ratio .2) to s1 while
# s1's residual ratio r = (30-k)/(100-5k) < 1 (s2's is 1/r), k = 0..17: 18 on s1. f2
# (ratio 5) picks the larger residual ratio: s2 (1/r(k)) until k = 17, where s1 after 18
# f1 has (10,12), 1.2 > 15/13 = 1.15: f2 to s1. Then s1 (9,7): f1 .578 vs .954 -> s1 (4,6);
# f2 1.5 vs 1.15 -> s1 (3,1); now only s2 (13,15) is feasible: f1, f2, f1, f2 ->
# (8,14), (7,9), (2,8), (1,3); nothing fits. f1 = 19 + 2, f2 = 2 + 19: Table I's (19,2,2,19).
BFDRF = {"f1": [19, 2], "f2": [2, 19]}


@pytest.mark.parametrize(
    ("name", "expected"),
    [("drf", DRF), ("tsf", TSF), ("psdsf", PSDSF), ("rpsdsf", RPSDSF), ("bfdrf", BFDRF)],
)
def test_paper_example_characterized(name: str, expected: dict[str, list[int]]) -> None:
    share = fair_shares(paper_engine(EngineConfig.flat(name)))
    assert placed(share) == expected
    assert share.as_dict() == {f: sum(row) for f, row in expected.items()}


def test_weight_two_for_f1() -> None:
    # DRF values 5 x1/130/2 and 5 x2/130: f1 takes about two for each of f2's.
    # s1: (1,0) -> f2 (1,1) -> f1 .5<1 (2,1) tie -> f1 (3,1) -> f2 (3,2) -> f1 (4,2) tie ->
    # f1 (5,2) -> f2 (5,3) -> f1 (6,3) tie -> f1 (7,3) -> f2 (7,4) mem 27 -> f1 (8,4) tie ->
    # f1 (9,4) mem 29: f2 no longer fits -> f1 (10,4) mem 30. s1 = (10, 4).
    # s2: f2 4 < 5 -> (10,5) tie -> f1 (11,5) -> f2 (11,6) -> f1 (12,6) tie -> f1 (13,6) ->
    # f2 (13,7) -> f1 (14,7) tie -> f1 (15,7) -> f2 (15,8): s2 cpus 5*5 + 4 = 29; f1 (7.5
    # < 8) does not fit, f2 does -> (15,9), cpus 30. s2 = (5, 5).
    engine = Engine(("cpus", "mem"), EngineConfig.flat("drf"))
    engine.add_agent("s1", S1)
    engine.add_agent("s2", S2)
    engine.register("f1", D1, weight=2.0, target=UNLIMITED)
    engine.register("f2", D2, target=UNLIMITED)
    assert placed(fair_shares(engine)) == {"f1": [10, 5], "f2": [4, 5]}


def test_placement_constraint() -> None:
    # f2 may run in zone b only (s2). s1: f1 alone, min(100/5, 30/1) = 20 -> cpus full.
    # s2: f2 runs while 5 x2/130 < 5*20/130; mem 100/5 = 20 of f2 fill s2 (cpus 20 <= 30),
    # then the tie at 20 goes to f1, which needs mem: nothing fits.
    engine = paper_engine(EngineConfig.flat("drf"), constraints={"zone": "b"})
    assert placed(fair_shares(engine)) == {"f1": [20, 0], "f2": [0, 20]}


def test_target_caps_the_fair_share() -> None:
    # f2's target 3: s1 alternates f1, f2 until (3,3) (cpus 18, mem 18); then f1 alone to
    # mem 30: 12 more -> (15,3). s2: f1 alone, cpus 30/5 = 6 (mem 6). f1 = 15 + 6.
    engine = paper_engine(EngineConfig.flat("drf"), target=3)
    assert placed(fair_shares(engine)) == {"f1": [15, 6], "f2": [3, 0]}


def test_role_level_two_roles() -> None:
    # Roles a = {f1, f3 (both 5 cpus, 1 mem)} and b = {f2}. Role DRF: 5 A/130 vs 5 B/130
    # with A = x1 + x3, B = x2: the roles alternate (a first on ties), and within a, f1
    # and f3 alternate (f1 first). s1: 5 a + 5 b fill mem (30) with a's picks f1, f3, f1,
    # f3, f1 -> f1 3, f3 2. s2: 5 a + 5 b fill cpus (30); a's picks f3 (2 < 3), f1, f3, f1,
    # f3 -> f1 2, f3 3. At framework level f2 would be one of three, here it is half.
    engine = Engine(("cpus", "mem"), EngineConfig.mesos("drf"))
    engine.add_agent("s1", S1)
    engine.add_agent("s2", S2)
    engine.register("f1", D1, role="a", target=UNLIMITED)
    engine.register("f2", D2, role="b", target=UNLIMITED)
    engine.register("f3", D1, role="a", target=UNLIMITED)
    assert placed(fair_shares(engine)) == {"f1": [3, 2], "f2": [5, 5], "f3": [2, 3]}


def test_role_weight_two() -> None:
    # Role b = {f2} weighs 2: a's value A (x1) against b's B/2 (x2/2), a first on ties.
    # s1: a (1,0) -> b (1,1) -> b (1,2) tie -> a (2,2) -> b (2,3), (2,4) tie -> a (3,4) ->
    # b (3,5): mem 3 + 25 = 28, f2 no longer fits -> a (4,5), (5,5): mem 30. s1 = (5, 5).
    # s2 (f1 a2, f2 b2 there): b to B = 10 (b2 5) tie -> a (6,10) -> b (6,11), (6,12) tie
    # -> a (7,12) -> b (7,13), (7,14) tie -> a (8,14) -> b (8,15), (8,16): cpus 3*5 + 11 =
    # 26, f1 (5 cpus) no longer fits -> b alone to cpus 30: b2 = 15 (mem 3 + 75 <= 100).
    # s2 = (3, 15).
    config = EngineConfig.mesos("drf", role_weights={"b": 2.0})
    engine = Engine(("cpus", "mem"), config)
    engine.add_agent("s1", S1)
    engine.add_agent("s2", S2)
    engine.register("f1", D1, role="a", target=UNLIMITED)
    engine.register("f2", D2, role="b", target=UNLIMITED)
    assert placed(fair_shares(engine)) == {"f1": [5, 3], "f2": [5, 15]}


def test_running_tasks_and_filters_play_no_part() -> None:
    engine = paper_engine(EngineConfig.flat("drf"))
    before = placed(fair_shares(engine))
    engine.allocate(0.0)
    engine.refuse("f1", "s1", until=1e9)
    assert engine.tasks_of("f1") > 0
    assert placed(fair_shares(engine)) == before


def test_same_answer_at_every_call_and_free_slots_skipped() -> None:
    engine = paper_engine(EngineConfig.flat("drf", seed=7))
    engine.register("gone", D1, target=5)
    engine.unregister("gone")
    first, second = fair_shares(engine), fair_shares(engine)
    assert np.array_equal(first.by_agent, second.by_agent)
    assert first.as_dict() == {"f1": 10, "f2": 10}


def test_unit_is_the_criterion_of_one_executor() -> None:
    # DRF: max(5/130, 1/130) = 1/26 for both. PS-DSF: best agent's 1/gamma: f1 1/20 on s1,
    # f2 1/20 on s2; with f2 held to s1 by a constraint, 1/6.
    assert fair_shares(paper_engine(EngineConfig.flat("drf"))).unit == pytest.approx([1 / 26] * 2)
    share = fair_shares(paper_engine(EngineConfig.flat("psdsf"), constraints={"zone": "a"}))
    assert share.unit == pytest.approx([1 / 20, 1 / 6])


def test_cluster_source_and_oblivious_mode() -> None:
    # Oblivious: the chosen framework keeps every whole task of the remainder. s1: f1 (tie)
    # keeps min(100/5, 30/1) = 20, cpus full. s2: f2 (DRF 0 < 20/26) keeps min(30, 20) = 20.
    cluster = Cluster.from_arrays([[100, 30], [30, 100]], [[5, 1], [1, 5]])
    share = fair_shares(cluster, EngineConfig.flat("drf", mode=Mode.OBLIVIOUS))
    assert placed(share) == {"f0": [20, 0], "f1": [0, 20]}
    with pytest.raises(ValueError, match="EngineConfig"):
        fair_shares(cluster)


def test_cache_recomputes_only_when_the_inputs_change() -> None:
    engine = paper_engine(EngineConfig.flat("drf"))
    cache = FairShareCache()
    first = cache.get(engine)
    engine.allocate(0.0)  # running tasks do not change the fair share
    assert cache.get(engine) is first
    assert cache.computed == 1
    engine.set_target("f2", 3)  # a target does: the target test's allocation
    assert placed(cache.get(engine)) == {"f1": [15, 6], "f2": [3, 0]}
    engine.apply(engine.config.replace(scheduler="bfdrf"))  # and so does the configuration
    engine.set_target("f2", UNLIMITED)
    assert placed(cache.get(engine)) == BFDRF
    assert cache.computed == 3


@pytest.mark.parametrize("name", ["drf", "psdsf", "rpsdsf", "tsf", "bfdrf"])
@pytest.mark.parametrize("level", ["framework", "role"])
def test_no_framework_yet_has_an_empty_fair_share(name: str, level: str) -> None:
    """A broker's agents arrive before any tenant registers: the fair share is empty, not an
    error (BF-DRF's selector took the argmin of an empty array), and a tenant registered
    then gone leaves it empty again."""
    engine = Engine(("cpus", "mem"), EngineConfig.mesos(name, level=level))
    engine.add_agent("a", {"cpus": 4, "mem": 4096})
    assert fair_shares(engine).as_dict() == {}
    engine.register("f", {"cpus": 1, "mem": 512}, target=2)
    assert fair_shares(engine).as_dict() == {"f": 2}
    engine.unregister("f")
    assert fair_shares(engine).as_dict() == {}
