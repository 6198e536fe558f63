"""The Google-scale bench's extrapolation along the cost trend (hand-computed cases)."""

from __future__ import annotations

import pytest

from benchmarks.bench_google_scale import trend_cpu_s


def _marks(cpu_at_hour, hours):
    return [{"sim_s": 3600.0 * h, "cpu_s": cpu_at_hour(h)} for h in hours]


def test_a_cost_that_grows_linearly_is_integrated_to_the_horizon():
    # An hour from h costs 10 + 0.1 (h + 1/2) CPU s: cpu(h) = 10 h + 0.05 h^2.
    marks = _marks(lambda h: 10 * h + 0.05 * h * h, range(0, 11))
    # cpu(10) = 105; the hours from 10 to 20 add 10 x 10 + 0.05 (400 - 100) = 115.
    assert trend_cpu_s(marks, 20 * 3600.0) == pytest.approx(105 + 115)


def test_a_steady_cost_is_the_steady_rate():
    marks = _marks(lambda h: 3.0 * h, range(0, 9))
    assert trend_cpu_s(marks, 100 * 3600.0) == pytest.approx(300.0)


def test_too_few_steady_marks_and_a_finished_run():
    assert trend_cpu_s(_marks(lambda h: h, [0, 1, 2]), 10 * 3600.0) is None  # hour 0 is cold
    marks = _marks(lambda h: 2.0 * h, range(0, 6))
    assert trend_cpu_s(marks, 5 * 3600.0) == pytest.approx(10.0)
