"""benchmarks/sim_claims.py's report on synthetic runs: claim rows (intervals, wins, ties,
verdicts), the finish order and the makespan table's bound label, checked against values
worked out by hand."""

from __future__ import annotations

import pytest

from benchmarks.sim_claims import MODES, Run, Runs, claims, finish_order, makespan_table, raw

SCHEDULERS = ("drf", "tsf", "psdsf", "rpsdsf", "bfdrf")
T3 = 3.182446  # Student t, 0.975 quantile, 3 degrees of freedom
T2 = 4.302653  # ... 2 degrees of freedom


def run(makespan: float, mem: float = 0.5, pi: float = 0.0, wordcount: float = 0.0,
        fluid: float = 50.0, chain: float = 40.0) -> Run:  # fmt: skip
    return Run(
        makespan=makespan,
        group_end={"pi": pi, "wordcount": wordcount},
        allocated={"cpus": 0.6, "mem": mem},
        grants=1,
        bound_fluid=fluid,
        bound_chain=chain,
    )


def synthetic(makespans: dict[tuple[str, str], list[float]], default: list[float]) -> Runs:
    return {
        (name, mode): [run(m) for m in makespans.get((name, mode), default)]
        for name in SCHEDULERS
        for mode in MODES
    }


def row_cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip("|").split("|")]


def find(items, text: str, a: str):
    matches = [c for c in items if c.text == text and c.a == a]
    assert len(matches) == 1, [(c.text, c.a) for c in items]
    return matches[0]


def test_a_sooner_claim_row_by_hand():
    """PS-DSF - DRF (oblivious) = [-12, -6, 0, -6]: mean -6, sd sqrt(24), half
    t3 * sqrt(24) / 2 = 7.80, so [-13.8, +1.8]: 3 wins, 1 tie, and the interval holds 0."""
    base = [100.0] * 4
    batch = synthetic({("psdsf", "oblivious"): [88.0, 94.0, 100.0, 94.0]}, base)
    homo = synthetic({}, base)
    vf = {key: [run(100.0, mem=0.5)] * 4 for key in batch}
    claim = find(claims(batch, homo, vf), "PS-DSF finishes the batch sooner than DRF",
                 "psdsf obli.")  # fmt: skip
    half = T3 * 24**0.5 / 2
    assert claim.comparison.diff.mean == pytest.approx(-6)
    assert claim.comparison.diff.half == pytest.approx(half, rel=1e-6)
    cells = row_cells(claim.row())
    assert cells[2] == "psdsf obli. vs drf obli."
    assert cells[3] == f"-6 s [{-6 - half:+.0f}, {-6 + half:+.0f}]" == "-6 s [-14, +2]"
    assert cells[4] == "-6.0% [-13.8%, +1.8%]"
    assert cells[5] == "3/4 (1 tied)"
    assert cells[6] == "not shown (interval includes 0)"
    # The characterized twin saw no difference at all: every seed tied, a zero interval.
    twin = find(claims(batch, homo, vf), "PS-DSF finishes the batch sooner than DRF",
                "psdsf char.")  # fmt: skip
    assert row_cells(twin.row())[5] == "0/4 (4 tied)"


def test_a_higher_is_better_claim_counts_the_seeds_where_a_is_higher():
    """V-F memory, rPS-DSF - BF-DRF in points = [+10, 0, +5, -2]: rPS-DSF higher in 2 seeds
    (a makespan-style count would say 1), 1 tie; mean 3.25, the interval includes 0."""
    batch = synthetic({}, [100.0] * 4)
    vf: Runs = {key: [run(100.0)] * 4 for key in batch}
    vf[("rpsdsf", "characterized")] = [run(100.0, mem=m) for m in (0.80, 0.70, 0.75, 0.70)]
    vf[("bfdrf", "characterized")] = [run(100.0, mem=m) for m in (0.70, 0.70, 0.70, 0.72)]
    claim = find(claims(batch, batch, vf),
                 "V-F: rPS-DSF uses memory better than BF-DRF (time-averaged mem %)",
                 "rpsdsf char.")  # fmt: skip
    d = [10.0, 0.0, 5.0, -2.0]
    mean = sum(d) / 4
    sd = (sum((x - mean) ** 2 for x in d) / 3) ** 0.5
    half = T3 * sd / 2
    cells = row_cells(claim.row())
    assert cells[3] == f"{mean:+.1f} pt [{mean - half:+.1f}, {mean + half:+.1f}]"
    assert cells[5] == "2/4 (1 tied)"
    assert cells[6] == "not shown (interval includes 0)"
    # Clearly higher in every seed: holds, 4 of 4.
    vf[("rpsdsf", "characterized")] = [run(100.0, mem=m) for m in (0.80, 0.81, 0.79, 0.80)]
    claim = find(claims(batch, batch, vf),
                 "V-F: rPS-DSF uses memory better than BF-DRF (time-averaged mem %)",
                 "rpsdsf char.")  # fmt: skip
    assert row_cells(claim.row())[5:] == ["4/4", "holds"]


def test_comparable_and_contradicted_verdicts_in_rows():
    """TSF 1 % above DRF in every seed: comparable holds; TSF 10 % faster than rPS-DSF and
    BF-DRF in every seed: their "sooner than TSF" claims are contradicted, 0 wins."""
    batch = synthetic({("tsf", "characterized"): [101.0, 101.0, 101.0, 101.0],
                       ("rpsdsf", "characterized"): [111.0, 112.0, 111.0, 112.0],
                       ("bfdrf", "characterized"): [111.0, 111.0, 112.0, 112.0]},
                      [100.0] * 4)  # fmt: skip
    items = claims(batch, batch, {key: [run(100.0)] * 4 for key in batch})
    tsf = row_cells(find(items, "TSF comparable to DRF", "tsf char.").row())
    assert tsf[3:] == ["+1 s [+1, +1]", "+1.0% [+1.0%, +1.0%]", "0/4", "holds"]
    for other in ("rpsdsf", "bfdrf"):
        cells = row_cells(find(items, f"{other} sooner than TSF", f"{other} char.").row())
        assert cells[5] == "0/4"
        assert cells[6] == "contradicted (interval above 0)"


def test_only_the_papers_claims_are_scored():
    batch = synthetic({}, [100.0, 101.0])
    items = claims(batch, batch, batch)
    scored = {(c.a, c.b) for c in items}
    # TSF and BF-DRF appear only in characterized mode, as in the paper.
    assert not any(("tsf" in a or "bfdrf" in a) and "obli." in a for a, _ in scored)
    assert not any(("tsf" in b or "bfdrf" in b) and "obli." in b for _, b in scored)
    assert sum("cited" in c.text for c in items) == 2  # the homogeneous claim, both modes


def test_finish_order_by_hand():
    """Pi - WordCount ends = [+10, -15, 0]: WordCount strictly first in 1 of 3 seeds; mean
    -5/3, sd sqrt(475/3), half t2 * sd / sqrt(3) = 31.3."""
    runs: Runs = {("drf", "characterized"): [run(1, pi=100, wordcount=90),
                                             run(1, pi=80, wordcount=95),
                                             run(1, pi=100, wordcount=100)]}  # fmt: skip
    lines = finish_order("synthetic", runs)
    rows = [row_cells(line) for line in lines if line.startswith("| drf")]
    half = T2 * (475 / 3) ** 0.5 / 3**0.5
    assert rows == [["drf", "characterized", "1/3", f"-2 +- {half:.0f}"]]
    assert f"{half:.0f}" == "31"


@pytest.mark.parametrize(("fluid", "chain", "binding"), [(50.0, 40.0, "fluid"),
                                                         (40.0, 50.0, "chain")])  # fmt: skip
def test_makespan_table_names_the_binding_bound(fluid, chain, binding):
    runs: Runs = {
        (name, mode): [run(m + (name == "psdsf") * 10 + (mode == "oblivious") * 5,
                           fluid=fluid, chain=chain) for m in (100.0, 102.0)]
        for name in ("drf", "psdsf") for mode in MODES
    }  # fmt: skip
    text = "\n".join(makespan_table("synthetic", runs))
    other = {"fluid": "chain", "chain": "fluid"}[binding]
    assert f"the larger is the {binding} (" in text
    assert f"the larger is the {other}" not in text
    assert f"fluid {fluid:.0f} +- 0 s, chain {chain:.0f} +- 0 s" in text
    half = 12.706205 * 2**0.5 / 2**0.5  # [100, 102]: sd sqrt(2) over sqrt(2) seeds, t(0.975, 1)
    rows = {row_cells(line)[0]: row_cells(line)[1:] for line in text.splitlines()
            if line.startswith(("| drf", "| psdsf"))}  # fmt: skip
    assert rows["drf"] == [f"101 +- {half:.0f}", f"106 +- {half:.0f}", "60.0 / 50.0",
                           "60.0 / 50.0"]  # fmt: skip
    assert rows["psdsf"][:2] == [f"111 +- {half:.0f}", f"116 +- {half:.0f}"]


def test_raw_keeps_every_seed_in_order():
    runs: Runs = {("drf", "oblivious"): [run(10.0, pi=3.0), run(12.0, mem=0.25)],
                  ("psdsf", "characterized"): [run(9.0)]}  # fmt: skip
    out = raw(runs)
    assert list(out) == ["drf/oblivious", "psdsf/characterized"]
    assert [r["makespan"] for r in out["drf/oblivious"]] == [10.0, 12.0]
    assert out["drf/oblivious"][0]["group_end"] == {"pi": 3.0, "wordcount": 0.0}
    assert out["drf/oblivious"][1]["allocated"] == {"cpus": 0.6, "mem": 0.25}
    assert set(out["psdsf/characterized"][0]) == {"makespan", "group_end", "allocated", "grants",
                                                   "bound_fluid", "bound_chain"}  # fmt: skip
