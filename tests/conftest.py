from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from allocator.model import Cluster
from allocator.table1 import paper_example


@pytest.fixture(scope="session")
def example() -> Cluster:
    """Paper 002 eqs. (11)-(12): d1=(5,1), d2=(1,5), c1=(100,30), c2=(30,100)."""
    return paper_example()


def make_cluster(
    capacity: list[list[float]],
    demand: list[list[float]],
    weight: list[float] | None = None,
    eligible: list[list[bool]] | None = None,
    max_tasks: list[float] | None = None,
    resources: tuple[str, ...] = ("cpus", "mem"),
) -> Cluster:
    cap = np.array(capacity, dtype=float)
    dem = np.array(demand, dtype=float)
    n_f, n_a = len(dem), len(cap)
    return Cluster(
        resources=resources,
        agent_names=tuple(f"s{i + 1}" for i in range(n_a)),
        framework_names=tuple(f"f{n + 1}" for n in range(n_f)),
        capacity=cap,
        demand=dem,
        weight=np.array(weight if weight is not None else [1.0] * n_f),
        eligible=np.array(eligible, dtype=bool)
        if eligible is not None
        else np.ones((n_f, n_a), bool),
        max_tasks=np.array(max_tasks if max_tasks is not None else [np.inf] * n_f, dtype=float),
        role_of=np.zeros(n_f, dtype=np.int64),
        role_names=("*",),
    )


def run_fairbroker(*args: str) -> subprocess.CompletedProcess[str]:
    """The `fairbroker` command as a user runs it, in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
