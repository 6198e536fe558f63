"""`fill` on large instances (issue 17): what the output carries, what it costs, and the
guards. The wall-time and memory targets live in benchmarks/bench_fill_scale.py."""

from __future__ import annotations

import json
import re
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.commands import one_line_error, run_fairbroker
from support.instances import make_cluster

from allocator import memory_guard
from allocator.errors import ScenarioError
from allocator.filling import progressive_fill
from allocator.model import ScenarioSpec, eligibility_matrix, matches_constraints
from allocator.policy import scheduler
from allocator.scenarios.static import parse_scenario
from allocator.state import AllocationState
from allocator.trials import run_trials

VALUES = st.sampled_from(["a", "b", 1, 2, True])


@settings(max_examples=60, deadline=None)
@given(
    attributes=st.lists(st.dictionaries(st.sampled_from(["rack", "gpu"]), VALUES, max_size=2),
                        min_size=1, max_size=5),
    constraints=st.lists(st.dictionaries(st.sampled_from(["rack", "gpu", "zone"]),
                                         st.one_of(VALUES, st.lists(VALUES, max_size=3)),
                                         max_size=2), min_size=1, max_size=4),
)  # fmt: skip
def test_vectorised_eligibility_is_the_attribute_match(attributes, constraints):
    spec = ScenarioSpec.model_validate({
        "agents": [{"name": f"a{i}", "resources": {"cpus": 1}, "attributes": a}
                   for i, a in enumerate(attributes)],
        "frameworks": [{"name": f"f{n}", "demand": {"cpus": 1}, "constraints": c}
                       for n, c in enumerate(constraints)],
    })  # fmt: skip
    expected = [[matches_constraints(a.attributes, f.constraints) for a in spec.agents]
                for f in spec.frameworks]  # fmt: skip
    assert eligibility_matrix(spec).tolist() == expected


def test_trial_statistics_equal_those_of_the_stored_fills():
    rng = np.random.default_rng(5)
    capacity, demand = rng.integers(5, 30, (6, 2)), rng.integers(1, 6, (4, 2))
    cluster = make_cluster(capacity.tolist(), demand.tolist())
    summary = run_trials(cluster, "drf", "random", trials=7, seed=3, with_optimum=False)
    fills = []
    for t in range(7):  # the same draws, kept whole: the independent expectation
        state = AllocationState(cluster)
        chosen = scheduler("drf")
        progressive_fill(state, chosen.criterion(), "random", np.random.default_rng([3, t]))
        fills.append(state.tasks.copy())
    fills = np.array(fills, dtype=float)
    assert np.allclose(summary.tasks_mean, fills.mean(axis=0))
    assert np.allclose(summary.tasks_std, fills.std(axis=0, ddof=1))
    assert np.array_equal(summary.totals, fills.sum(axis=(1, 2)))
    assert np.array_equal(summary.framework_totals, fills.sum(axis=2))


def test_framework_summary_and_sparse_matrix_of_the_paper_example(example):
    summary = run_trials(example, "rpsdsf", trials=3, with_optimum=False)  # x = [[19, 2], [2, 19]]
    rows = summary.framework_summary()
    # f1: 21 tasks of (5, 1) = (105, 21) of C = (130, 130): dominant share 105/130.
    assert rows[0] == {"name": "f1", "tasks": 21, "tasks_std": 0, "agents_used": 2,
                       "dominant_share": pytest.approx(105 / 130, abs=1e-6)}  # fmt: skip
    only_s1 = make_cluster([[10, 10], [10, 10]], [[1, 1], [1, 1]], eligible=[[1, 0], [1, 1]])
    matrix = run_trials(only_s1, "drf", with_optimum=False).matrix_json()
    assert set(matrix["mean"]["f1"]) == {"s1"}  # a pair with no task is left out
    assert set(matrix["std"]["f1"]) == {"s1"}


def test_a_fill_too_big_for_memory_is_refused_before_building_it(monkeypatch):
    monkeypatch.setattr(memory_guard, "available_bytes", lambda: 10_000)
    data = {"agents": [{"name": f"a{i}", "resources": {"cpus": 1}} for i in range(100)],
            "frameworks": [{"name": f"f{n}", "demand": {"cpus": 1}}
                           for n in range(10)]}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"10 frameworks x 100 agents would need about "
                       r"42\.0 KB of memory; 10\.0 KB is available"):  # fmt: skip
        parse_scenario(data)


def _scenario(tmp_path, frameworks: int, agents: int) -> str:
    """Agents that each hold one task of any framework: a fill of `agents` grants."""
    data = {"agents": [{"name": f"a{i}", "resources": {"cpus": 1, "mem": 1}}
                       for i in range(agents)],
            "frameworks": [{"name": f"f{n}", "demand": {"cpus": 1, "mem": 1}}
                           for n in range(frameworks)]}  # fmt: skip
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_text_is_a_framework_summary_and_the_matrix_is_on_request(tmp_path):
    path = _scenario(tmp_path, 3, 9)
    done = run_fairbroker("fill", path, "-s", "drf", "--seed", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["framework", "tasks", "(sd)", "agents", "used", "dominant",
                                "share"]  # fmt: skip
    # 9 one-task agents among 3 equal frameworks under DRF: 3 tasks each, on 3 agents.
    assert lines[2].split() == ["f0", "3.00", "(0.00)", "3", "0.3333"]
    assert "x matrix: 3 x 9 not shown (use --matrix)" in done.stdout
    assert max(len(line) for line in lines) < 100
    shown = run_fairbroker("fill", path, "-s", "drf", "--seed", "1", "--matrix")
    assert "mean tasks x_{n,i}" in shown.stdout and "not shown" not in shown.stdout


def test_json_leaves_out_a_large_matrix_and_says_why(tmp_path):
    path = _scenario(tmp_path, 401, 500)  # 200,500 pairs: over both defaults
    done = run_fairbroker("fill", path, "-s", "drf", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["tasks"] is None and out["optimum"] is None
    assert "optimum: skipped (200,500 pairs > 200,000; use --optimum)" in out["notes"]
    assert "tasks (the x matrix) left out; use --matrix" in out["notes"]
    assert len(out["frameworks"]) == 401
    assert sum(f["tasks"] for f in out["frameworks"]) == out["total"]["mean"] == 500
    text = run_fairbroker("fill", path, "-s", "drf", "--no-matrix")
    assert "optimum: skipped (200,500 pairs > 200,000; use --optimum)" in text.stdout
    sparse = json.loads(run_fairbroker("fill", path, "-s", "drf", "--json", "--matrix").stdout)
    assert sum(len(row) for row in sparse["tasks"]["mean"].values()) == 500  # one per agent


def test_max_grants_stops_a_runaway_fill(tmp_path):
    done = run_fairbroker("fill", _scenario(tmp_path, 2, 50), "-s", "drf", "--max-grants", "10")
    one_line_error(done, "--max-grants: the fill was stopped after 10 grants")


def test_max_grants_equal_to_a_complete_fill_is_not_a_stop():
    # rPS-DSF fills the paper example with x = [[19, 2], [2, 19]]: 42 grants in all.
    example = "allocator/data/paper002-example.yaml"
    done = run_fairbroker("fill", example, "-s", "rpsdsf", "--max-grants", "42", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["grants"] == 42 and out["total"]["mean"] == 42
    one_line_error(run_fairbroker("fill", example, "-s", "rpsdsf", "--max-grants", "41"),
                   "--max-grants: the fill was stopped after 41 grants")  # fmt: skip


def _fast_fill_cluster(rng: np.random.Generator, equal: bool):
    n_a, n_f, n_r = int(rng.integers(1, 40)), int(rng.integers(1, 9)), int(rng.integers(1, 4))
    if equal:  # every framework alike: exact ties at every step
        capacity, demand = np.full((n_a, n_r), 4.0), np.ones((n_f, n_r))
    else:
        scale = rng.choice([1.0, 0.1, 3e8], n_r)  # units per resource, shares in floats
        capacity = rng.integers(0, 30, (n_a, n_r)) * scale
        demand = rng.integers(0, 6, (n_f, n_r)) * scale
        demand[demand.sum(axis=1) == 0, 0] = scale[0]
    eligible = rng.random((n_f, n_a)) < 0.8 if rng.random() < 0.5 else None
    limits = [float(rng.integers(0, 20)) if rng.random() < 0.3 else float("inf")
              for _ in range(n_f)]  # fmt: skip
    weight = rng.choice([1.0, 2.0, 0.3], n_f).tolist()
    return make_cluster(capacity.tolist(), demand.tolist(), weight,
                        None if eligible is None else eligible.tolist(), limits,
                        resources=("cpus", "mem", "gpus")[:n_r])  # fmt: skip


@pytest.mark.parametrize("case", range(150))
@pytest.mark.parametrize("name", ["drf", "tsf", "psdsf", "rpsdsf"])
def test_native_fill_makes_the_generic_fills_grants_in_order(name, case):
    from support.reference_fill.filling import progressive_fill as reference_fill

    from allocator import native_fill

    rng = np.random.default_rng(case)
    cluster = _fast_fill_cluster(rng, equal=case % 5 == 0)
    max_grants = int(rng.integers(1, 60)) if case % 7 == 0 else None
    generic = AllocationState(cluster)
    criterion, draws = scheduler(name).criterion(), np.random.default_rng([case, 1])
    expected = reference_fill(generic, criterion, "rrr", draws, max_grants=max_grants)
    fast, rng = AllocationState(cluster), np.random.default_rng([case, 1])
    with mock.patch.object(native_fill, "MIN_PAIRS", 0):
        assert native_fill.applies(fast, criterion, "rrr", "random", "framework", False, False)
        frameworks, agents = native_fill.fill(fast, scheduler(name).criterion(), "rrr", rng,
                                              max_grants)  # fmt: skip
    assert list(zip(frameworks.tolist(), agents.tolist(), strict=True)) == [
        (g.framework, g.agent) for g in expected
    ]
    assert rng.bit_generator.state == draws.bit_generator.state
    for field in ("tasks", "count", "alloc", "residual", "wanting"):
        before, after = getattr(generic, field), getattr(fast, field)
        before, after = (before(), after()) if callable(before) else (before, after)
        assert np.array_equal(before, after), field  # bit for bit, not approximately
    assert np.array_equal(generic.changed_at, fast.changed_at) and generic.changes == fast.changes


@pytest.mark.parametrize("name", ["drf", "bfdrf"])
def test_fill_seconds_time_the_fills_not_the_loading_of_their_kernels(name):
    """`fairbroker fill`'s fill_seconds: loading the compiled kernels (from numba's cache, or
    compiling them) happens once, before any fill is timed; the trials still go native and
    make the fills they made."""
    from allocator import native_fill, trials

    cluster = _fast_fill_cluster(np.random.default_rng(3), equal=False)
    clock = [0.0]
    loads = []

    def load(criterion, selection):  # a load that takes an hour on the fake clock
        loads.append(selection)
        clock[0] += 3600.0

    fills = []

    def native(state, *args):
        clock[0] += 1.0  # and each fill a second
        fills.append(state)
        return fill(state, *args)

    fill = native_fill.fill
    with (mock.patch.object(native_fill, "MIN_PAIRS", 0),
          mock.patch.object(native_fill, "load_kernels", load),
          mock.patch.object(native_fill, "fill", native),
          mock.patch.object(trials.time, "perf_counter", lambda: clock[0])):  # fmt: skip
        timed = run_trials(cluster, name, trials=3, with_optimum=False)
    assert len(loads) == 1 and len(fills) == 3
    assert timed.fill_seconds == 3.0
    plain = run_trials(cluster, name, trials=3, with_optimum=False)
    assert np.array_equal(timed.tasks_mean, plain.tasks_mean) and timed.grants == plain.grants


def test_native_fill_is_only_used_where_it_is_the_same_fill(example):
    from allocator import native_fill
    from allocator.policy.drf import DRF

    drf = scheduler("drf").criterion()

    def applies(state, criterion=drf, selection="rrr", ties="random", level="framework",
                agent_pass=False, single_offer=False):  # fmt: skip
        with mock.patch.object(native_fill, "MIN_PAIRS", 0):
            return native_fill.applies(state, criterion, selection, ties, level, agent_pass,
                                       single_offer)  # fmt: skip

    assert applies(AllocationState(example))
    assert not native_fill.applies(AllocationState(example), drf, "rrr", "random", "framework",
                                   False, False)  # fmt: skip
    assert not applies(AllocationState(example, "oblivious"))
    assert not applies(AllocationState(example), selection="random")
    assert not applies(AllocationState(example), ties="waste")
    assert not applies(AllocationState(example), agent_pass=True)
    assert not applies(AllocationState(example), single_offer=True)
    assert not applies(AllocationState(example), criterion=type("Sub", (DRF,), {})())
    assert not applies(AllocationState(example), criterion=scheduler("fuga").criterion())
    used = AllocationState(example)
    used.grant(0, 0)
    assert not applies(used)


def _run_on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the command with stderr on a pseudo-terminal (progress is shown only on one):
    exit code, stdout, and everything written to the terminal."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios

    main, side = pty.openpty()
    # a terminal 120 columns wide (a fresh pty has 0, and tqdm then draws nothing)
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-c", "from allocator.cli import main; main()", *args],
        stdout=subprocess.PIPE,
        stderr=side,
        env=env,
    )  # fmt: skip  (stdout stays small: --no-matrix)
    os.close(side)
    seen = b""
    try:
        while True:  # read until the child has exited and closed the terminal (EIO)
            ready, _, _ = select.select([main], [], [], 120)
            assert ready, "no output and no exit within 120 s"
            try:
                chunk = os.read(main, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        stdout = process.stdout.read().decode()
        code = process.wait(timeout=60)
    finally:
        process.stdout.close()
        os.close(main)
        if process.poll() is None:
            process.kill()
            process.wait()
    return code, stdout, seen.decode(errors="replace")


@pytest.mark.parametrize(("scheduler_name", "size"), [("drf", 200), ("tsf", 50)])
def test_a_long_fill_shows_its_progress_on_a_terminal(tmp_path, scheduler_name, size):
    """200,000 grants of drf, 50,000 of tsf (the generic fill: 5,000 pairs are below the
    native fill's MIN_PAIRS)."""
    import os

    data = {"agents": [{"name": f"a{i}", "resources": {"cpus": size, "mem": size}}
                       for i in range(1000)],
            "frameworks": [{"name": f"f{n}", "demand": {"cpus": 1, "mem": 1}}
                           for n in range(5)]}  # fmt: skip
    path = tmp_path / "long.json"
    path.write_text(json.dumps(data))
    args = ["fill", str(path), "-s", scheduler_name, "--json", "--no-optimum", "--no-matrix"]
    env = dict(os.environ, FAIRBROKER_PROGRESS_DELAY="0")  # shown from the start
    code, stdout, terminal = _run_on_a_terminal(args, env)
    assert code == 0, terminal
    # the share of the bottleneck resource and tqdm's estimate of the rest
    assert "fill: " in terminal and "% of the bottleneck resource" in terminal, terminal
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d\]", terminal), terminal  # elapsed<remaining
    assert re.search(r"[\d,]+ grants", terminal), terminal
    quiet = run_fairbroker(*args, "--quiet")
    assert quiet.returncode == 0 and quiet.stderr == ""
    # the bar goes to the terminal only; stdout is the same but for the time measured
    shown, plain = json.loads(stdout), json.loads(quiet.stdout)
    assert shown.pop("fill_seconds") > 0 and plain.pop("fill_seconds") > 0
    assert shown == plain
    assert shown["grants"] == 1000 * size
