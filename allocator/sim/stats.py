"""Statistics over seeds: means with Student-t confidence intervals, and paired comparisons.

Runs at the same seed see the same jobs (`allocator.sim.workload`), so two configurations are
compared seed by seed: the mean of the per-seed differences, its confidence interval, and how
many seeds each side won.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

LEVEL = 0.95
COMPARABLE = 0.03  # "comparable", "within a few percent": the interval within +-3 %


@dataclass(frozen=True)
class Estimate:
    """A mean over seeds and its two-sided confidence interval (half-width `half`)."""

    mean: float
    half: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def excludes_zero(self) -> bool:
        return bool(self.low > 0 or self.high < 0)

    def fmt(self, digits: int = 0, unit: str = "") -> str:
        return f"{self.mean:.{digits}f} +- {self.half:.{digits}f}{unit}"


def estimate(values: Sequence[float], level: float = LEVEL) -> Estimate:
    """Mean and t-interval; the half-width is NaN for fewer than two values."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        raise ValueError("no values")
    mean = float(x.mean())
    if n < 2:
        return Estimate(mean, float("nan"), n)
    sem = float(x.std(ddof=1)) / np.sqrt(n)
    return Estimate(mean, float(student_t.ppf(0.5 + level / 2, n - 1) * sem), n)


@dataclass(frozen=True)
class Paired:
    """a - b seed by seed (lower is better, as for a makespan)."""

    diff: Estimate
    wins: int  # seeds where a < b
    losses: int  # seeds where a > b
    base: float  # mean of b, for relative statements

    @property
    def n(self) -> int:
        return self.diff.n

    @property
    def relative(self) -> Estimate:
        """The difference as a fraction of b's mean."""
        return Estimate(self.diff.mean / self.base, self.diff.half / self.base, self.diff.n)

    def sooner(self, margin: float = 0.0) -> bool:
        """a is lower by more than `margin` (a fraction of b's mean), the whole interval
        beyond it; margin 0: the interval excludes zero."""
        return bool(self.diff.high < -margin * self.base)

    def later(self, margin: float = 0.0) -> bool:
        """a is higher by more than `margin` (a fraction of b's mean), the whole interval."""
        return bool(self.diff.low > margin * self.base)

    def within(self, fraction: float) -> bool:
        """The whole interval lies within +-fraction of b's mean (equivalence)."""
        rel = self.relative
        return bool(-fraction <= rel.low and rel.high <= fraction)


def paired(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Paired:
    """Compare a with b, the i-th value of each from the same seed."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in length: {len(x)} and {len(y)}")
    d = x - y
    return Paired(
        diff=estimate(d, level),
        wins=int((d < 0).sum()),
        losses=int((d > 0).sum()),
        base=float(y.mean()),
    )


# ---- verdicts on a paired comparison (p = a - b) -----------------------------------------
def sooner(p: Paired) -> str:
    """a below b (a makespan: a finishes sooner)."""
    if p.sooner():
        return "holds"
    if p.later():
        return "contradicted (interval above 0)"
    return "not shown (interval includes 0)"


def higher(p: Paired) -> str:
    """a above b (a quantity where higher is better)."""
    if p.later():
        return "holds"
    if p.sooner():
        return "contradicted (interval below 0)"
    return "not shown (interval includes 0)"


def comparable(p: Paired, fraction: float = COMPARABLE) -> str:
    """a within +-fraction of b: the whole interval inside (equivalence)."""
    rel = p.relative
    if p.within(fraction):
        return "holds"
    if rel.low > fraction or rel.high < -fraction:
        return f"contradicted (interval outside +-{fraction:.0%})"
    return f"not shown (interval reaches past +-{fraction:.0%})"
