"""Choosing the lowest criterion, and what to do when several frameworks tie."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

import numpy as np

#: Criteria closer than this (relative) are equal; they come from different float paths.
RELATIVE_TIE = 1e-9


class Ties(StrEnum):
    """random: a seeded uniform choice among the tied (what the paper's numbers come from).
    waste: prefer the tied framework that fits the most tasks on the agent (largest
    gamma_{n,i}), then random."""

    RANDOM = "random"
    WASTE = "waste"


def pick_lowest(
    values: np.ndarray,
    candidates: np.ndarray,
    rng: np.random.Generator,
    ties: Ties = Ties.RANDOM,
    fit: Callable[[np.ndarray], np.ndarray] | None = None,
) -> int:
    """Index (into the flattened `values`) of the lowest value among `candidates`, or -1.

    `fit(indices)` gives gamma for tied indices when `ties` is `waste`.
    """
    index = np.flatnonzero(candidates)
    if index.size == 0:
        return -1
    chosen = values.ravel()[index]
    low = chosen.min()
    if np.isfinite(low):
        tied = index[chosen <= low + RELATIVE_TIE * max(1.0, abs(low))]
    else:
        tied = index[chosen == low]
    if ties is Ties.WASTE and tied.size > 1 and fit is not None:
        gamma = fit(tied)
        tied = tied[gamma >= gamma.max() - RELATIVE_TIE * max(1.0, abs(gamma.max()))]
    if tied.size == 1:
        return int(tied[0])
    return int(tied[rng.integers(tied.size)])
