"""Problem instances the tests share: a Cluster from plain lists, random small clusters
(a hypothesis strategy), and a two-group batch on paper 002's three agent types."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from allocator.model import Cluster

#: Each job's executor in `two_roles`: Spark Pi's 2 cores and 640 MiB heap + 384 overhead.
DEMAND = {"cpus": 2.0, "mem": 1024.0}


def make_cluster(
    capacity: list[list[float]],
    demand: list[list[float]],
    weight: list[float] | None = None,
    eligible: list[list[bool]] | None = None,
    max_tasks: list[float] | None = None,
    resources: tuple[str, ...] = ("cpus", "mem"),
) -> Cluster:
    return Cluster.from_arrays(
        capacity,
        demand,
        resources,
        weight,
        eligible,
        max_tasks,
        agent_names=tuple(f"s{i + 1}" for i in range(len(capacity))),
        framework_names=tuple(f"f{n + 1}" for n in range(len(demand))),
    )


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    n_r = draw(st.integers(2, 3))
    n_a = draw(st.integers(1, 3))
    n_f = draw(st.integers(1, 4))
    positive = st.lists(st.integers(1, 30), min_size=n_r, max_size=n_r)
    capacity = draw(st.lists(positive, min_size=n_a, max_size=n_a))
    small = st.lists(st.integers(0, 8), min_size=n_r, max_size=n_r).filter(any)
    demand = draw(st.lists(small, min_size=n_f, max_size=n_f))
    weight = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=n_f, max_size=n_f))
    eligible = np.array(
        draw(
            st.lists(
                st.lists(st.booleans(), min_size=n_a, max_size=n_a), min_size=n_f, max_size=n_f
            )
        )
    )
    eligible[
        np.arange(n_f), draw(st.lists(st.integers(0, n_a - 1), min_size=n_f, max_size=n_f))
    ] = True
    max_tasks = draw(
        st.lists(st.one_of(st.just(np.inf), st.integers(1, 6)), min_size=n_f, max_size=n_f)
    )
    capacity = np.array(capacity, dtype=float)
    demand = np.array(demand, dtype=float)
    # Every framework fits on each of its eligible agents (the scenario loader's rule is
    # "at least one"; all of them keeps the draw simple).
    capacity = np.maximum(capacity, (demand[:, None, :] * eligible[:, :, None]).max(axis=0))
    return make_cluster(
        capacity.tolist(),
        demand.tolist(),
        weight,
        eligible.tolist(),
        max_tasks,
        resources=("cpus", "mem", "disk")[:n_r],
    )


def two_roles(weights: dict[str, float], executors: int = 20) -> dict:
    """Two groups, one job each, on paper 002's three agent types at the project's scale."""
    job = {"work": 60, "startup_s": 5, "executor_start_s": 3, "serial_s": 2,
           "release_spread_s": 2}  # fmt: skip
    return {
        "agents": [
            {"name": "t1", "resources": {"cpus": 4, "mem": 7168}, "attributes": {"type": "t1"}},
            {"name": "t2", "resources": {"cpus": 8, "mem": 4096}, "attributes": {"type": "t2"}},
            {"name": "t3", "resources": {"cpus": 6, "mem": 5632}, "attributes": {"type": "t3"}},
        ],
        "groups": [
            {"name": g, "weight": w, "queues": 1, "jobs_per_queue": 1, "demand": DEMAND,
             "executors": executors, "job": job}
            for g, w in weights.items()
        ],
    }  # fmt: skip
