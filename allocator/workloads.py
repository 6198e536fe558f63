"""Synthetic clusters and tenants shaped like the Google cluster (paper 001, Table I).

The real trace is not reachable offline; the server mix below is the published one.
"""

from __future__ import annotations

import numpy as np

from allocator.model import Cluster

#: Paper 001 Table I: (count, CPU, memory) with the largest server = 1 in each resource.
GOOGLE_SERVER_MIX: tuple[tuple[int, float, float], ...] = (
    (6732, 0.50, 0.50),
    (3863, 0.50, 0.25),
    (1001, 0.50, 0.75),
    (795, 1.00, 1.00),
    (126, 0.25, 0.25),
    (52, 0.50, 0.12),
    (5, 0.50, 0.03),
    (5, 0.50, 0.97),
    (3, 1.00, 0.50),
    (1, 0.50, 0.06),
)

#: Largest server used to scale the mix: 64 CPUs and 256 GiB (memory in MiB, as Mesos).
LARGEST_SERVER = {"cpus": 64.0, "mem": 256.0 * 1024}


def google_agent_capacities(
    n_agents: int, rng: np.random.Generator, largest: dict[str, float] | None = None
) -> np.ndarray:
    """(n_agents, 2) cpus/mem capacities drawn from the Google server mix."""
    largest = largest or LARGEST_SERVER
    mix = np.array(GOOGLE_SERVER_MIX)
    kinds = rng.choice(len(mix), size=n_agents, p=mix[:, 0] / mix[:, 0].sum())
    return mix[kinds, 1:] * np.array([largest["cpus"], largest["mem"]])


def random_demands(n_frameworks: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2) per-task cpus/mem (MiB), log-uniform in [0.25, 8] CPUs and [256 MiB, 32 GiB]."""
    cpus = np.exp(rng.uniform(np.log(0.25), np.log(8.0), n_frameworks))
    mem = np.exp(rng.uniform(np.log(256.0), np.log(32 * 1024.0), n_frameworks))
    return np.round(np.column_stack([cpus, mem]), 3)


def google_like_cluster(n_agents: int, n_frameworks: int, seed: int = 0) -> Cluster:
    """A Cluster of Google-mix agents and tenants with random demand vectors."""
    rng = np.random.default_rng(seed)
    capacity = google_agent_capacities(n_agents, rng)
    demand = random_demands(n_frameworks, rng)
    return Cluster.from_arrays(capacity, demand)
