"""`rng.integers(0, k)` inside compiled kernels, without numba's per-call array.

numba's `Generator.integers` builds a one-element array for each scalar draw, which costs
about 55 ns against a few for the draw itself; a fill in a backlog makes two draws per
framework it retires. `below` makes NumPy's own draw (Lemire's rejection on the bit
generator's next 32-bit output, for bounds up to 2**32, as `random_bounded_uint64_fill`
does), so the stream, and every decision drawn from it, is the same. Beyond 2**32 it is
numba's own draw, which is not NumPy's there (no kernel draws among that many).
"""

from __future__ import annotations

import numpy as np
from numba import uint64
from numba.np.random.generator_core import next_uint32  # numba is pinned (pyproject)

from allocator.jit import njit

_LOW32 = 0xFFFFFFFF


@njit(inline="always")
def below(rng: np.random.Generator, k: int) -> int:
    """`rng.integers(0, k)` for k >= 1, as numba draws it in a kernel (NumPy's draw up to
    2**32): the same value and the same generator state after."""
    if k - 1 >= _LOW32:
        return rng.integers(0, k)
    return below32(rng, k)


@njit(inline="always")
def below32(rng: np.random.Generator, k: int) -> int:
    """`below` for 1 <= k <= 2**32 (a count of items held in memory), which allocates
    nothing: a `jit.leaf` kernel may draw with it."""
    if k <= 1:
        return 0  # NumPy draws nothing for a range of one value
    span = uint64(k)
    m = uint64(next_uint32(rng.bit_generator)) * span
    leftover = m & uint64(_LOW32)
    if leftover < span:
        threshold = (uint64(_LOW32) - uint64(k - 1)) % span
        while leftover < threshold:
            m = uint64(next_uint32(rng.bit_generator)) * span
            leftover = m & uint64(_LOW32)
    return np.int64(m >> uint64(32))
