"""`allocator.pcg64` draws what NumPy's PCG64 draws: the same 32-bit outputs, the same
bounded draws (`draws.below`), and the generator left in the same state."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba.np.random.generator_core import next_uint32

from allocator import pcg64
from allocator.draws import below
from allocator.jit import njit


@njit
def _outputs_of_generator(rng: np.random.Generator, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = next_uint32(rng.bit_generator)
    return out


@njit
def _outputs_of_state(state: np.ndarray, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.uint64)
    for i in range(n):
        out[i] = pcg64.next32(state)
    return out


@njit
def _bounded(rng, bounds: np.ndarray) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.empty(bounds.shape[0], dtype=np.int64)
    for i in range(bounds.shape[0]):
        out[i] = below(rng, bounds[i])
    return out


def _moved(seed: int, skip: int) -> np.random.Generator:
    """A generator part way through its stream (a buffered half or not, per `skip`)."""
    rng = np.random.default_rng(seed)
    _outputs_of_generator(rng, skip)
    return rng


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**64 - 1), skip=st.integers(0, 5), n=st.integers(0, 300))
def test_the_outputs_and_the_state_after_are_numpys(seed: int, skip: int, n: int) -> None:
    theirs, ours = _moved(seed, skip), _moved(seed, skip)
    state = pcg64.state_of(ours)
    assert _outputs_of_state(state, n).tolist() == _outputs_of_generator(theirs, n).tolist()
    pcg64.restore(ours, state)
    assert ours.bit_generator.state == theirs.bit_generator.state
    assert ours.random() == theirs.random()  # NumPy's own draws go on from there


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**64 - 1),
    bounds=st.lists(st.one_of(st.integers(1, 12), st.integers(1, 2**32 - 1)), max_size=60),
)
def test_bounded_draws_are_numpys(seed: int, bounds: list[int]) -> None:
    """`below` on the state array: NumPy's `integers(0, k)` value by value (rejections
    included: bounds near 2**32 reject often)."""
    rng, numpy_side = np.random.default_rng(seed), np.random.default_rng(seed)
    state = pcg64.state_of(rng)
    drawn = _bounded(state, np.array(bounds, dtype=np.int64))
    assert drawn.tolist() == [int(numpy_side.integers(0, k)) for k in bounds]
    pcg64.restore(rng, state)
    assert rng.bit_generator.state == numpy_side.bit_generator.state


def test_another_bit_generator_is_refused() -> None:
    with pytest.raises(ValueError, match="PCG64"):
        pcg64.state_of(np.random.Generator(np.random.MT19937(1)))
