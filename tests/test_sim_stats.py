"""Confidence intervals, paired comparisons and claim verdicts on synthetic inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from allocator.sim.stats import comparable, estimate, higher, paired, sooner


def test_estimate_by_hand():
    """[1, 2, 3, 6]: mean 3, sd sqrt(14/3), t(0.975, 3) = 3.18245."""
    e = estimate([1, 2, 3, 6])
    assert e.mean == 3 and e.n == 4
    assert e.half == pytest.approx(3.182446 * math.sqrt(14 / 3) / 2, rel=1e-6)
    assert (e.low, e.high) == pytest.approx((3 - e.half, 3 + e.half))
    assert not e.excludes_zero()  # 3 +- 3.44
    assert estimate([10, 11, 12]).excludes_zero()
    assert math.isnan(estimate([5]).half)
    with pytest.raises(ValueError):
        estimate([])


def test_paired_difference_and_wins_by_hand():
    """d = a - b = [-1, 1, 3]: mean 1, sd 2, t(0.975, 2) = 4.302653; one win, two losses."""
    p = paired([10, 12, 14], [11, 11, 11])
    assert p.diff.mean == pytest.approx(1)
    assert p.diff.half == pytest.approx(4.302653 * 2 / math.sqrt(3), rel=1e-6)
    assert (p.wins, p.losses, p.n) == (1, 2, 3)
    assert p.base == 11
    assert p.relative.mean == pytest.approx(1 / 11)
    assert not p.sooner() and not p.later()  # the interval straddles 0


def test_pairing_removes_the_shared_seed_effect():
    """Seeds vary a lot, a is always 10 below b: unpaired intervals would overlap, the paired
    one is exactly -10 with no spread; a wins every seed."""
    rng = np.random.default_rng(0)
    b = 2000 + 200 * rng.standard_normal(10)
    p = paired(b - 10, b)
    assert p.diff.mean == pytest.approx(-10)
    assert p.diff.half == pytest.approx(0, abs=1e-9)
    assert (p.wins, p.losses) == (10, 0)
    assert p.sooner()
    assert estimate(b - 10).high > estimate(b).low  # unpaired: not distinguishable
    with pytest.raises(ValueError, match="differ in length"):
        paired([1, 2], [1])


def test_verdicts():
    base = np.full(10, 1000.0)
    noise = np.array([-1, 1] * 5, dtype=float)
    assert sooner(paired(base - 50 + noise, base)) == "holds"
    assert sooner(paired(base + 50 + noise, base)).startswith("contradicted")
    assert sooner(paired(base + 20 * noise, base)).startswith("not shown")
    # Comparable within 3 %: 1 % apart with a tight interval holds; 5 % apart is contradicted;
    # a wide interval reaching past 3 % is not shown either way.
    assert comparable(paired(base + 10 + noise, base)) == "holds"
    assert comparable(paired(base + 50 + noise, base)).startswith("contradicted")
    assert comparable(paired(base + 25 + 10 * noise, base)).startswith("not shown")
    assert higher(paired(base + 5 + noise, base)) == "holds"
    assert higher(paired(base - 5 + noise, base)).startswith("contradicted")
