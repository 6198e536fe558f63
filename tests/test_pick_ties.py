"""The kept pick (`allocator.pick_ties`) against a scan of every candidate at each pick
(written here, and `engine_columns._pick_loop`): the same framework, the same retirements
and the same random draws, on candidates with many tied values (most frameworks waiting
with nothing allocated share a value of 0) and near ties, grant after grant as
`engine_bulk._fill` keeps them."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.engine_columns import _pick_loop
from allocator.pick_ties import candidates as kept_candidates
from allocator.pick_ties import pick, rekey, served, ties_of
from allocator.policy.ties import RELATIVE_TIE


def scan_pick(members, active, wanting, role_of, n_roles, values, role_values, fits, rng):
    """The lowest role with a candidate, then the lowest framework in it, ties drawn in
    index order; one that does not fit is retired and the pick made again."""
    while True:
        live = [n for n in members if active[n] and wanting[n]]
        if not live:
            return -1
        if n_roles > 0:
            roles = sorted({int(role_of[n]) for n in live})
            low = min(role_values[g] for g in roles)
            limit = low + RELATIVE_TIE * max(1.0, abs(low))
            tied = [g for g in roles if role_values[g] <= limit]
            role = tied[0] if len(tied) == 1 else tied[rng.integers(0, len(tied))]
            live = [n for n in live if role_of[n] == role]
        low = min(values[n] for n in live)
        limit = low + RELATIVE_TIE * max(1.0, abs(low))
        tied = [n for n in live if values[n] <= limit]
        framework = tied[0] if len(tied) == 1 else tied[rng.integers(0, len(tied))]
        if fits[framework]:
            return framework
        active[framework] = False


#: Values to draw from: zeros and near ties (within `RELATIVE_TIE`) are what the draws see.
LEVELS = (0.0, 0.0, 0.1, 0.25, 0.25 * (1 + RELATIVE_TIE / 2), 0.25 * (1 + RELATIVE_TIE * 1.5),
          0.5)


@st.composite
def candidates(draw):
    n_f = draw(st.integers(1, 60))
    n_roles = draw(st.sampled_from([0, 1, 3, 8]))
    role_of = np.array(draw(st.lists(st.integers(0, max(n_roles - 1, 0)), min_size=n_f,
                                     max_size=n_f)), dtype=np.int64)  # fmt: skip
    levels = st.sampled_from(LEVELS)
    values = np.array(draw(st.lists(levels, min_size=n_f, max_size=n_f)))
    role_values = np.array(draw(st.lists(levels, min_size=max(n_roles, 1),
                                         max_size=max(n_roles, 1))))  # fmt: skip
    active = np.array(draw(st.lists(st.booleans(), min_size=n_f, max_size=n_f)))
    wanting = np.array(draw(st.lists(st.booleans(), min_size=n_f, max_size=n_f)))
    fits = np.array(draw(st.lists(st.booleans(), min_size=n_f, max_size=n_f)))
    members = np.arange(n_f)
    if n_roles:
        members = members[np.argsort(role_of, kind="stable")]
    grants = draw(st.lists(levels, max_size=6))
    seed = draw(st.integers(0, 2**32 - 1))
    return members, active, wanting, role_of, n_roles, values, role_values, fits, grants, seed


def fit_inputs(fits: np.ndarray):
    """`_fits_somewhere`'s inputs where framework n fits (at agent 0) exactly when fits[n]."""
    n_f = len(fits)
    eligible = fits.reshape(n_f, 1).copy()
    floor = np.full((n_f, 1), -np.inf)
    residual = np.ones((1, 1))
    witness = np.full(n_f, -1, dtype=np.int64)
    return eligible, floor, residual, witness, np.ones(n_f, dtype=bool), np.zeros(0, np.int64)


@settings(max_examples=400, deadline=None)
@given(case=candidates())
def test_kept_pick_is_the_scan_pick_grant_after_grant(case) -> None:
    members, active, wanting, role_of, n_roles, values, role_values, fits, grants, seed = case
    sides = {
        name: [active.copy(), wanting.copy(), values.copy(), role_values.copy(),
               np.random.default_rng(seed)]
        for name in ("kept", "scan", "loop")
    }  # fmt: skip
    ours = sides["kept"]
    finite, kept = kept_candidates(members, ours[0], ours[1], role_of, n_roles, ours[2],
                                   ours[3])  # fmt: skip
    assert finite
    inputs = fit_inputs(fits)
    loop_inputs = fit_inputs(fits)
    tied = np.empty(len(values) + len(role_values), dtype=np.int64)
    for step, raised in enumerate([*grants, None]):
        got = pick(kept, n_roles, ours[0], *inputs, ours[4])
        scan = sides["scan"]
        want = scan_pick(members, scan[0], scan[1], role_of, n_roles, scan[2], scan[3], fits,
                         scan[4])  # fmt: skip
        loop = sides["loop"]
        eligible, floor, residual, witness, fresh, near = loop_inputs
        by_loop = _pick_loop(members, loop[0], loop[1], role_of, n_roles, loop[2], loop[3],
                             eligible, floor, residual, witness, fresh, near, loop[4],
                             tied)  # fmt: skip
        assert got == want == by_loop, f"pick {step}"
        for side in sides.values():
            assert (side[0] == ours[0]).all()
            assert side[4].bit_generator.state == ours[4].bit_generator.state
        if got < 0 or raised is None:
            break
        # A grant to the picked framework: its value (and its role's) rise; every other
        # grant it stops wanting.
        for side in sides.values():
            side[2][got] += raised
            side[3][role_of[got]] += raised
            side[1][got] = step % 2 == 0
        assert served(kept, n_roles, got, bool(ours[1][got]), ours[2][got],
                      ours[3][role_of[got]])  # fmt: skip


def test_a_value_that_is_not_finite_is_reported_before_any_draw() -> None:
    values = np.array([0.0, np.nan])
    finite, _ = kept_candidates(np.arange(2), np.ones(2, bool), np.ones(2, bool),
                                np.zeros(2, np.int64), 0, values, np.zeros(1))  # fmt: skip
    assert not finite
    finite, _ = kept_candidates(np.arange(2), np.ones(2, bool), np.array([True, False]),
                                np.zeros(2, np.int64), 0, values, np.zeros(1))  # fmt: skip
    assert finite  # the NaN is not a candidate's


def test_a_served_framework_whose_value_is_not_finite_stops_the_draws() -> None:
    members = np.arange(3)
    active, wanting = np.ones(3, bool), np.ones(3, bool)
    values = np.zeros(3)
    finite, kept = kept_candidates(members, active, wanting, np.zeros(3, np.int64), 0,
                                   values, np.zeros(1))  # fmt: skip
    assert finite
    assert not served(kept, 0, 1, True, np.inf, 0.0)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(LEVELS), min_size=1, max_size=40),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(0, 39), st.sampled_from(LEVELS)), max_size=12),
)
def test_a_new_key_moves_its_item_where_a_stable_sort_puts_it(keys, n_segments, changes):
    keys = np.array(keys)
    n = len(keys)
    start = np.unique(np.linspace(0, n, n_segments + 1).astype(np.int64))
    ties = ties_of(keys, start)
    for item, key in changes:  # up or down: a grant raises a key, the order allows both
        item %= n
        s = int(np.searchsorted(start, item, side="right") - 1)
        keys[item] = key
        rekey(ties, item, s, key)
        for a, b in itertools.pairwise(start.tolist()):
            assert ties[2][a:b].tolist() == (a + np.argsort(keys[a:b], kind="stable")).tolist()


@st.composite
def placed(draw):
    """Candidates with real fit inputs: floors and residuals over a few agents, some
    frameworks fresh, the others tried only at the agents near and at their witness."""
    n_f = draw(st.integers(1, 30))
    n_a = draw(st.integers(1, 6))
    amounts = st.sampled_from([0.0, 1.0, 2.0, 3.0])
    residual = np.array(draw(st.lists(amounts, min_size=2 * n_a, max_size=2 * n_a)))
    demand = np.array(draw(st.lists(amounts, min_size=2 * n_f, max_size=2 * n_f)))
    floor = np.where(demand > 0, demand - 1e-9, -np.inf).reshape(n_f, 2)
    eligible = np.array(draw(st.lists(st.booleans(), min_size=n_f * n_a, max_size=n_f * n_a)))
    near = np.flatnonzero(np.array(draw(st.lists(st.booleans(), min_size=n_a, max_size=n_a))))
    fresh = np.array(draw(st.lists(st.booleans(), min_size=n_f, max_size=n_f)))
    witness = np.array(draw(st.lists(st.integers(-1, n_a - 1), min_size=n_f, max_size=n_f)))
    values = np.array(draw(st.lists(st.sampled_from(LEVELS), min_size=n_f, max_size=n_f)))
    seed = draw(st.integers(0, 2**32 - 1))
    return (n_f, eligible.reshape(n_f, n_a), floor, residual.reshape(n_a, 2), witness, fresh,
            near, values, seed)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(case=placed())
def test_frameworks_out_of_reach_retire_as_the_fit_tests_retire_them(case) -> None:
    n_f, eligible, floor, residual, witness, fresh, near, values, seed = case
    members = np.arange(n_f)
    role_of = np.zeros(n_f, dtype=np.int64)
    sides = [(np.ones(n_f, dtype=bool), witness.copy(), np.random.default_rng(seed))
             for _ in range(2)]  # fmt: skip
    ours, theirs = sides
    _, kept = kept_candidates(members, ours[0], np.ones(n_f, dtype=bool), role_of, 0, values,
                              values)  # fmt: skip
    got = pick(kept, 0, ours[0], eligible, floor, residual, ours[1], fresh, near, ours[2])
    want = _pick_loop(members, theirs[0], np.ones(n_f, dtype=bool), role_of, 0, values, values,
                      eligible, floor, residual, theirs[1], fresh, near, theirs[2],
                      np.empty(n_f, dtype=np.int64))  # fmt: skip
    assert got == want
    assert (ours[0] == theirs[0]).all() and (ours[1] == theirs[1]).all()
    assert ours[2].bit_generator.state == theirs[2].bit_generator.state
