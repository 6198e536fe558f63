"""`fairbroker whatif`: paired runs, intervals, ranking, recommendation and figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.commands import run_fairbroker

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import parse_batch
from allocator.sim.batch_sim import BatchSimulator
from allocator.sim.whatif import MIN_DIFFERENCE, Config, Report, bar_axis, rolling, run_whatif

SMALL = {
    "name": "small",
    "agents": [
        {"name": "a", "resources": {"cpus": 8, "mem": 4}},
        {"name": "b", "resources": {"cpus": 4, "mem": 8}},
    ],
    "groups": [
        {"name": "x", "queues": 2, "jobs_per_queue": 2, "demand": {"cpus": 2, "mem": 1},
         "executors": 6, "job": {"work": 40, "jitter": {"work": 0.2, "random_release": True}}},
        {"name": "y", "queues": 2, "jobs_per_queue": 2, "demand": {"cpus": 1, "mem": 2},
         "executors": 6, "job": {"work": 30, "jitter": {"work": 0.2, "random_release": True}}},
    ],
}  # fmt: skip


def test_whatif_json_matches_independent_runs_and_writes_both_figures(tmp_path: Path):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    plot = tmp_path / "w.png"
    done = run_fairbroker("whatif", str(scenario), "--seeds", "3", "--schedulers",
                          "drf,psdsf", "--json", "--plot", str(plot))  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    configs = out["configurations"]
    assert len(configs) == 4 and out["seeds"] == 3
    means = [c["makespan_s"]["mean"] for c in configs]
    assert means == sorted(means) and [c["rank"] for c in configs] == [1, 2, 3, 4]
    assert configs[0]["vs_fastest_s"] is None
    assert all(isinstance(c["vs_fastest_s"]["significant"], bool) for c in configs[1:])
    # The same numbers as three separate simulator runs at seeds 0, 1, 2.
    spec = parse_batch(SMALL)
    for c in configs:
        runs = [
            BatchSimulator(spec, EngineConfig(c["scheduler"], mode=c["mode"], seed=s)).run()
            for s in range(3)
        ]
        assert c["makespan_s"]["mean"] == pytest.approx(np.mean([r.makespan_s for r in runs]),
                                                        abs=1e-3)  # fmt: skip
        x_jct = [np.mean([j.finished - j.submitted for j in r.jobs if j.group == "x"])
                 for r in runs]  # fmt: skip
        assert c["jct_mean_s"]["x"]["mean"] == pytest.approx(np.mean(x_jct), abs=1e-3)
        assert c["makespan_s"]["ci95"] > 0  # jittered work: the seeds differ
    assert out["recommendation"].startswith("Recommendation: ")
    assert out["figures"] == [str(plot), str(tmp_path / "w-summary.png")]
    for figure in out["figures"]:
        assert Path(figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, expected", [
    (["--schedulers", "drf,fifo"], "--schedulers: 'fifo' is not one of"),
    (["--modes", "fine"], "--modes: 'fine' is not one of"),
    (["--seeds", "1"], "--seeds"),
    (["--plot", "out.unknownext"], "unsupported file type"),
])  # fmt: skip
def test_bad_options_are_one_line_errors(tmp_path: Path, args, expected):
    scenario = tmp_path / "small.yaml"
    scenario.write_text(yaml.safe_dump(SMALL))
    done = run_fairbroker("whatif", str(scenario), *args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr


def report(makespans: dict[tuple[str, str], list[float]]) -> Report:
    configs = []
    for (name, mode), values in makespans.items():
        c = Config(name, mode, makespan=list(values))
        configs.append(c)
    return Report("synthetic", len(next(iter(makespans.values()))), 0, "role", "tick",
                  ("cpus", "mem"), configs)  # fmt: skip


def test_recommendation_and_marks_on_synthetic_runs():
    base = np.array([1000.0, 1100, 900, 1050, 950])
    wobble = np.array([1.0, -1, 2, -2, 0])
    clear = report({
        ("drf", "characterized"): base,
        ("rpsdsf", "characterized"): base * 0.95 + wobble,  # 5 % sooner every seed
        ("psdsf", "characterized"): base * 0.95 + 3 * wobble[::-1],  # the same within noise
    })  # fmt: skip
    ranked = [c.scheduler for c in clear.ranked()]
    assert ranked[-1] == "drf"
    line = clear.recommendation()
    best = ranked[0]
    assert line.startswith(f"Recommendation: {best}/characterized: 5.0% +- ")
    assert "than DRF (characterized)" in line and "faster in 5 of 5 seeds" in line
    other = "psdsf" if best == "rpsdsf" else "rpsdsf"
    assert f"not distinguishable from {other}/characterized" in line
    # The drf row is marked significant against the fastest; the near-tie is not.
    marks = {c.scheduler: p for c, p in clear.against_best()}
    assert marks["drf"].later() and not marks[other].later()
    # Differences that seeds do not separate: keep DRF.
    noisy = report({
        ("drf", "oblivious"): base,
        ("psdsf", "oblivious"): base - 5 + 40 * wobble,
    })  # fmt: skip
    assert noisy.recommendation().startswith("Recommendation: keep drf/oblivious")


def test_rolling_mean_of_a_step_series_by_hand():
    """0 until t = 10, then 1: a 10 s trailing mean ramps from 0 at t = 10 to 1 at t = 20."""
    times = np.array([0.0, 10.0, 30.0])
    values = np.array([[0.0], [1.0], [1.0]])
    grid, smooth = rolling(times, values, window=10, step=1)
    assert grid[0] == 0 and grid[-1] == 30
    at = dict(zip(grid.tolist(), smooth[:, 0].tolist(), strict=True))
    assert at[5.0] == 0.0 and at[14.0] == pytest.approx(0.5) and at[25.0] == pytest.approx(1.0)


def test_all_tied_says_so():
    runs = [100.0, 110.0]
    same = report({("drf", "characterized"): runs, ("psdsf", "oblivious"): runs})
    assert same.recommendation().startswith("Recommendation: none: no configuration is 1%")


def test_a_consistent_but_negligible_gain_is_not_a_reason_to_switch():
    """0.04 s sooner on a 132 s batch at every one of 10 seeds: the interval excludes 0, but
    the gain is 0.03 % of the makespan, below the 1 % worth acting on."""
    base = 132.0 + np.linspace(-0.5, 0.5, 10)
    tiny = report({
        ("drf", "characterized"): base,
        ("bfdrf", "characterized"): base - 0.04 + np.linspace(-0.001, 0.001, 10),
    })  # fmt: skip
    (_, none), (drf, p) = tiny.against_best()
    assert none is None and drf.scheduler == "drf"
    assert p.later() and not p.later(MIN_DIFFERENCE)  # significant, but not meaningful
    line = tiny.recommendation()
    assert line.startswith("Recommendation: keep drf/characterized"), line
    assert "not shown to be 1% or more at 10 seeds" in line
    # A 2 % gain at every seed is worth switching for.
    clear = report({("drf", "characterized"): base, ("bfdrf", "characterized"): base * 0.98})
    assert clear.recommendation().startswith("Recommendation: bfdrf/characterized: 2.0%")


def test_seeds_start_at_the_given_seed_and_the_figure_says_which_it_shows(tmp_path: Path):
    batch = parse_batch(SMALL)
    engine = EngineConfig.mesos("drf").replace(seed=7)
    fresh = run_whatif(batch, ["drf"], ["characterized"], 2, engine)
    assert fresh.first_seed == 7 and fresh.to_json()["first_seed"] == 7
    again = run_whatif(batch, ["drf"], ["characterized"], 3, engine.replace(seed=8))
    # Seeds 7, 8 and 8, 9, 10 overlap at seed 8: the same jobs, the same makespan.
    assert fresh.configs[0].makespan[1] == again.configs[0].makespan[0]
    assert fresh.title(one_seed=True).startswith("small: seed 7 of 2 paired seeds (7..8)")
    assert "2 paired seeds (7..8)" in fresh.render().splitlines()[0]


def test_live_batch_prediction_sits_beside_the_live_numbers(tmp_path: Path):
    from allocator.batch import prediction

    predicted = prediction.predict(parse_batch(SMALL), EngineConfig.mesos("rpsdsf"), seeds=2)
    assert len(predicted.configs) == 12 and predicted.seeds == 2
    live = {"scheduler": "psdsf", "mode": "oblivious", "makespan_s": 123.4,
            "jct_by_group_s": {"x": {"mean": 40.5}, "y": {"mean": None}},
            "allocated": {"cpus": 0.62, "mem": 0.7371}}  # fmt: skip
    text = prediction.render(predicted, live).splitlines()
    row = next(k for k, line in enumerate(text) if line.startswith("psdsf     oblivious"))
    assert text[row + 1].split() == ["live", "123.4", "40.5", "-", "62.0", "73.7"]
    config = next(c for c in predicted.configs if c.label == "psdsf/oblivious")
    assert float(text[row].split()[-1]) == pytest.approx(np.mean(config.allocated["mem"]) * 100,
                                                         abs=0.05)  # fmt: skip
    assert sum(line.strip().startswith("live") for line in text) == 1
    assert text[-1].startswith("Predicted best: ")
    prediction.plot(predicted, live, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_summary_bar_axis_says_when_it_does_not_start_at_zero():
    """Intervals 2200-2400: padded by 10 % of the 200 s span, the axis runs 2180-2420 and
    says it is cut; intervals reaching down to 5 start at 0 and say nothing."""
    bottom, top, note = bar_axis([2200.0, 2250.0, 2350.0, 2400.0])
    assert (bottom, top) == pytest.approx((2180.0, 2420.0))
    assert note == "axis cut: starts at 2180, not 0"
    assert bar_axis([5.0, 100.0]) == (0.0, pytest.approx(109.5), "")
