"""`fairbroker solve`, the whole-task rounding, and alpha-psdsf as an online criterion."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from support.commands import run_fairbroker
from support.instances import clusters

from allocator.exact import solve
from allocator.exact.registry import EXACT_POLICIES
from allocator.exact.rounding import round_feasible
from allocator.filling import progressive_fill
from allocator.model import Cluster
from allocator.policy import SCHEDULERS, Selection
from allocator.policy.alpha_psdsf import AlphaPSDSF
from allocator.policy.psdsf import PSDSF
from allocator.state import AllocationState

DATA = Path(__file__).resolve().parents[1] / "allocator" / "data"


def test_solve_json_is_one_object_with_fill_and_optimum_beside():
    done = run_fairbroker(
        "solve", str(DATA / "paper000-modified.yaml"), "--policy", "psdsf-exact",
        "--integer", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["policy"] == "psdsf-exact" and out["alpha"] is None and out["converged"]
    assert out["tasks"]["u3"]["s2"] == pytest.approx(32 / 3, abs=1e-6)
    assert out["tasks"]["u4"]["s2"] == pytest.approx(16 / 3, abs=1e-6)
    assert out["total"] == pytest.approx(24)
    # 32/3 and 16/3 floor to 10 and 5; u3's larger fraction (2/3) takes the spare task.
    assert out["integer"]["tasks"]["u3"] == {"s1": 0, "s2": 11}
    assert out["integer"]["tasks"]["u4"] == {"s1": 0, "s2": 5}
    assert out["optimum"]["tasks"] == 30
    assert out["fill"]["scheduler"] == "psdsf" and out["fill"]["total"] > 0


def test_solve_text_and_alpha():
    done = run_fairbroker(
        "solve", str(DATA / "paper001-fig1.yaml"), "-p", "alpha-psdsf", "--alpha", "1"
    )
    assert done.returncode == 0, done.stderr
    assert "alpha-psdsf, alpha 1.0: converged" in done.stdout
    assert "total tasks: 20.0000" in done.stdout
    done = run_fairbroker("solve", str(DATA / "paper001-fig1.yaml"), "-p", "alpha-psdsf", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["alpha"] == 3.0  # the default when --alpha is not given
    assert out["converged"] and 0 <= out["kkt_violation"] <= 1e-8  # the certificate's bound


def test_solve_reports_the_certificate_only_for_alpha_psdsf():
    text = run_fairbroker("solve", str(DATA / "paper001-fig1.yaml"), "-p", "alpha-psdsf")
    assert "(largest KKT violation " in text.stdout, text.stderr
    done = run_fairbroker("solve", str(DATA / "paper001-fig1.yaml"), "-p", "drfh", "--json")
    assert json.loads(done.stdout)["kkt_violation"] is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-p", "drfx"], "'drfx' is not one of drfh"),
        (["-p", "alpha-psdsf", "--alpha", "0"], "alpha: must be a positive finite number"),
        (["-p", "alpha-psdsf", "--alpha", "-2"], "alpha: must be a positive finite number"),
        (["-p", "drfh", "--alpha", "2"], "alpha: only alpha-psdsf takes --alpha, not drfh"),
        (["-p", "psdsf-exact", "--alpha", "3"], "alpha: only alpha-psdsf takes --alpha"),
    ],
)
def test_bad_options_are_one_line_errors(args, expected):
    done = run_fairbroker("solve", str(DATA / "paper001-fig1.yaml"), *args)
    assert done.returncode == 2
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_too_large_for_the_exact_solver_suggests_fill(tmp_path: Path):
    scenario = {
        "agents": [{"name": f"a{i}", "resources": {"cpus": 4, "mem": 4}} for i in range(500)],
        "frameworks": [{"name": f"f{n}", "demand": {"cpus": 1, "mem": 1}} for n in range(401)],
    }
    path = tmp_path / "big.yaml"
    path.write_text(json.dumps(scenario))
    done = run_fairbroker("solve", str(path), "-p", "drfh")
    assert done.returncode == 2
    assert "fairbroker fill" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@settings(max_examples=60, deadline=None)
@given(clusters(), st.sampled_from(sorted(EXACT_POLICIES)))
def test_rounding_is_feasible_and_between_floor_and_ceiling(cluster: Cluster, policy: str):
    x = solve(cluster, policy).tasks
    whole = round_feasible(cluster, x)
    assert (whole >= np.floor(x - 1e-7)).all() and (whole <= np.ceil(x + 1e-7)).all()
    assert (whole[~cluster.eligible] == 0).all()
    assert (whole.T @ cluster.demand <= cluster.capacity + 1e-9).all()
    assert (whole.sum(axis=1) <= cluster.max_tasks).all()


# ---- alpha-psdsf online ------------------------------------------------------------------


def test_online_key_is_the_marginal_utility_order(example: Cluster):
    """key = x_n gamma^(1/alpha - 1) / phi_n, the alpha-th root of 1 / marginal utility."""
    state = AllocationState(example)
    state.grant(0, 0, 3)
    state.grant(1, 0, 1)
    gamma = example.fit()  # 20, 6 / 6, 20
    for alpha in (0.5, 1.0, 3.0, 50.0):
        expected = state.count[:, None] * gamma ** (1 / alpha - 1) / example.weight[:, None]
        np.testing.assert_allclose(AlphaPSDSF(alpha).matrix(state), expected, rtol=1e-12)
        np.testing.assert_allclose(AlphaPSDSF(alpha).column(state, 1), expected[:, 1])


def test_online_alpha_spans_task_count_fairness_to_psdsf(example: Cluster):
    def fill(criterion) -> np.ndarray:
        state = AllocationState(example)
        progressive_fill(state, criterion, Selection.RRR, np.random.default_rng(3))
        return state.tasks

    np.testing.assert_array_equal(fill(AlphaPSDSF(1e9)), fill(PSDSF()))
    one = AlphaPSDSF(1.0)
    state = AllocationState(example)
    state.grant(0, 0, 2)
    np.testing.assert_array_equal(one.matrix(state)[:, 0], [2, 0])  # fewest tasks first


def test_alpha_psdsf_is_a_scheduler_for_fill_and_sim(tmp_path: Path):
    assert isinstance(SCHEDULERS["alpha-psdsf"].criterion(), AlphaPSDSF)
    done = run_fairbroker("fill", str(DATA / "paper002-example.yaml"), "-s", "alpha-psdsf",
                          "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"]["mean"] == 42
    batch = {
        "agents": [{"name": "s", "resources": {"cpus": 8, "mem": 8}}],
        "groups": [
            {"name": "g", "queues": 1, "jobs_per_queue": 1, "demand": {"cpus": 1, "mem": 1},
             "executors": 4, "job": {"work": 40, "startup_s": 5, "executor_start_s": 3,
                                     "serial_s": 2, "release_spread_s": 2}},
        ],
    }  # fmt: skip
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(batch))
    done = run_fairbroker("sim", str(path), "--scheduler", "alpha-psdsf", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["makespan_s"] == pytest.approx(20)


def test_alpha_psdsf_is_a_serve_scheduler():
    done = run_fairbroker("serve", "--print-config", "--scheduler", "alpha-psdsf")
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["scheduler"] == "alpha-psdsf"
    done = run_fairbroker("serve", "--print-config", "--scheduler", "alpha-psdf")
    assert done.returncode == 2 and "did you mean alpha-psdsf?" in done.stderr
