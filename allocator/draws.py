"""`rng.integers(0, k)` inside compiled kernels, without numba's per-call array.

numba's `Generator.integers` builds a one-element array for each scalar draw, which costs
about 55 ns against a few for the draw itself; a fill in a backlog makes two draws per
framework it retires. `below` makes NumPy's own draw (Lemire's rejection on the bit
generator's next 32-bit output, for bounds up to 2**32, as `random_bounded_uint64_fill`
does), so the stream, and every decision drawn from it, is the same. Beyond 2**32 it is
numba's own draw, which is not NumPy's there (no kernel draws among that many).

Both draw on a Generator or on a PCG64 generator's state array (`allocator.pcg64`), which
gives the same stream without the cost of passing a Generator into a kernel.
"""

from __future__ import annotations

import numpy as np
from numba import types, uint64
from numba.extending import overload
from numba.np.random.generator_core import next_uint32  # numba is pinned (pyproject)

from allocator import pcg64
from allocator.jit import njit

_LOW32 = 0xFFFFFFFF


def _next32(rng):  # type: ignore[no-untyped-def]
    """The next 32-bit output of `rng`: a Generator, or `pcg64.state_of` one (kernels only)."""
    raise NotImplementedError("compiled kernels only")


@overload(_next32)
def _next32_of(rng):  # type: ignore[no-untyped-def]
    if isinstance(rng, types.Array):
        def of_state(rng):  # type: ignore[no-untyped-def]
            return pcg64.next32(rng)

        return of_state

    def of_generator(rng):  # type: ignore[no-untyped-def]
        return next_uint32(rng.bit_generator)

    return of_generator


def _wide(rng, k):  # type: ignore[no-untyped-def]
    """`rng.integers(0, k)` past 2**32 (kernels only)."""
    raise NotImplementedError("compiled kernels only")


@overload(_wide)
def _wide_of(rng, k):  # type: ignore[no-untyped-def]
    if isinstance(rng, types.Array):
        def unsupported(rng, k):  # type: ignore[no-untyped-def]
            if k > 0:  # (always: typed as the Generator's draw, an int)
                raise ValueError("a draw among more than 2**32 values needs a Generator")
            return 0

        return unsupported
    return lambda rng, k: rng.integers(0, k)


@njit(inline="always")
def below(rng: np.random.Generator | np.ndarray, k: int) -> int:
    """`rng.integers(0, k)` for k >= 1, as numba draws it in a kernel (NumPy's draw up to
    2**32): the same value and the same generator state after. `rng` may be a PCG64
    generator's `pcg64.state_of`, which draws the same."""
    if k - 1 >= _LOW32:
        return _wide(rng, k)
    return below32(rng, k)


@njit(inline="always")
def below32(rng: np.random.Generator | np.ndarray, k: int) -> int:
    """`below` for 1 <= k <= 2**32 (a count of items held in memory), which allocates
    nothing: a `jit.leaf` kernel may draw with it."""
    if k <= 1:
        return 0  # NumPy draws nothing for a range of one value
    span = uint64(k)
    m = uint64(_next32(rng)) * span
    leftover = m & uint64(_LOW32)
    if leftover < span:
        threshold = (uint64(_LOW32) - uint64(k - 1)) % span
        while leftover < threshold:
            m = uint64(_next32(rng)) * span
            leftover = m & uint64(_LOW32)
    return np.int64(m >> uint64(32))
