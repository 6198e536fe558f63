"""`draws.below` is NumPy's `integers(0, k)`: same values, same generator state after."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit  # not cached: a cached test kernel would not see draws.py change

from allocator.draws import below


@njit
def _below_all(rng: np.random.Generator, bounds: np.ndarray) -> np.ndarray:
    out = np.empty(bounds.shape[0], dtype=np.int64)
    for j in range(bounds.shape[0]):
        out[j] = below(rng, bounds[j])
    return out


@njit
def _integers_all(rng: np.random.Generator, bounds: np.ndarray) -> np.ndarray:
    out = np.empty(bounds.shape[0], dtype=np.int64)
    for j in range(bounds.shape[0]):
        out[j] = rng.integers(0, bounds[j])
    return out


@njit
def _then_random(rng: np.random.Generator) -> float:
    return rng.random()


bounds_strategy = st.lists(
    st.one_of(
        st.integers(1, 40),
        st.integers(1, 2**32),  # up to the 32-bit path's last bound
        st.sampled_from([1, 2, 3, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), bounds=bounds_strategy)
def test_below_is_numpys_integers(seed: int, bounds: list[int]) -> None:
    numpy_rng, compiled_rng = np.random.default_rng(seed), np.random.default_rng(seed)
    expected = [int(numpy_rng.integers(0, k)) for k in bounds]
    got = _below_all(compiled_rng, np.array(bounds, dtype=np.int64)).tolist()
    assert got == expected
    assert all(0 <= v < k for v, k in zip(got, bounds, strict=True))
    # The state after is the same: the next draws agree, in Python and compiled.
    assert _then_random(compiled_rng) == numpy_rng.random()
    assert compiled_rng.integers(0, 7, size=5).tolist() == numpy_rng.integers(0, 7, size=5).tolist()


def test_below_rejects_as_numpy_does() -> None:
    """A bound just above 2**31 rejects about half of the 32-bit draws: many rejections
    over a long stream, each consuming one more draw."""
    bounds = np.full(5000, 2**31 + 1, dtype=np.int64)
    numpy_rng, compiled_rng = np.random.default_rng(11), np.random.default_rng(11)
    assert (
        _below_all(compiled_rng, bounds).tolist()
        == numpy_rng.integers(0, 2**31 + 1, size=5000).tolist()
    )
    assert _then_random(compiled_rng) == numpy_rng.random()


def test_below_beyond_32_bits_is_numbas_draw() -> None:
    """Past 2**32 numba's `integers` is not NumPy's (its 64-bit path differs); `below` stays
    what the kernels drew before it."""
    bounds = np.array([2**32 + 1, 3_244_668_557_498_744_316, 2**62, 5, 2**40], dtype=np.int64)
    first, second = np.random.default_rng(1), np.random.default_rng(1)
    assert _below_all(first, bounds).tolist() == _integers_all(second, bounds).tolist()
    assert _then_random(first) == _then_random(second)
