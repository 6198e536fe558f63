"""NumPy's PCG64 stream on a plain array, for kernels that draw without a Generator.

numba unboxes a `np.random.Generator` argument through ctypes at every call: about 32 us,
against a few for the whole call otherwise, and a BF-DRF run in a backlog is one call
(`engine_direct`). A kernel given `state_of(rng)` instead draws with `next32` exactly what
`next_uint32(rng.bit_generator)` draws (PCG64's XSL-RR output of its 128-bit LCG, the
32-bit halves of each output handed out low first, as NumPy's `pcg64_next32` does), and
`restore` writes the state back into the generator.
"""

from __future__ import annotations

import numpy as np
from numba import uint64

from allocator.jit import njit

_MASK64 = (1 << 64) - 1
#: PCG's default 128-bit multiplier, in halves.
_MULT_HI = np.uint64(2549297995355413924)
_MULT_LO = np.uint64(4865540595714422341)
_LOW32 = np.uint64(0xFFFFFFFF)
#: The state array: the LCG's state and increment in 64-bit halves, then NumPy's buffered
#: half of the last output (`has_uint32`, `uinteger`).
STATE_HI, STATE_LO, INC_HI, INC_LO, HAS_UINT32, UINTEGER = range(6)


def state_of(rng: np.random.Generator) -> np.ndarray:
    """The generator's PCG64 state as a (6,) uint64 array (a ValueError for another bit
    generator)."""
    kept = rng.bit_generator.state
    if kept["bit_generator"] != "PCG64":
        raise ValueError(f"not a PCG64 generator: {kept['bit_generator']}")
    state, inc = kept["state"]["state"], kept["state"]["inc"]
    return np.array([state >> 64, state & _MASK64, inc >> 64, inc & _MASK64,
                     kept["has_uint32"], kept["uinteger"]], dtype=np.uint64)  # fmt: skip


def restore(rng: np.random.Generator, state: np.ndarray) -> None:
    """Leave the generator where the draws on `state` left it."""
    hi, lo, inc_hi, inc_lo, has, kept = (int(v) for v in state)
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": hi << 64 | lo, "inc": inc_hi << 64 | inc_lo},
        "has_uint32": has,
        "uinteger": kept,
    }


@njit(inline="always")
def _high_product(a: np.uint64, b: np.uint64) -> np.uint64:
    """The upper 64 bits of the 128-bit product a * b."""
    a_lo, a_hi = a & _LOW32, a >> uint64(32)
    b_lo, b_hi = b & _LOW32, b >> uint64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    cross = (lo_lo >> uint64(32)) + (hi_lo & _LOW32) + a_lo * b_hi
    return a_hi * b_hi + (hi_lo >> uint64(32)) + (cross >> uint64(32))


@njit(inline="always")
def next64(state: np.ndarray) -> np.uint64:
    """Step the LCG (state * multiplier + increment, mod 2**128) and return the XSL-RR
    output of the new state."""
    hi, lo = state[STATE_HI], state[STATE_LO]
    new_hi = _high_product(lo, _MULT_LO) + hi * _MULT_LO + lo * _MULT_HI
    new_lo = lo * _MULT_LO
    inc_lo = state[INC_LO]
    low = new_lo + inc_lo
    carry = uint64(1) if low < new_lo else uint64(0)
    high = new_hi + state[INC_HI] + carry
    state[STATE_HI] = high
    state[STATE_LO] = low
    rotation = high >> uint64(58)
    x = high ^ low
    return (x >> rotation) | (x << ((uint64(64) - rotation) & uint64(63)))


@njit(inline="always")
def next32(state: np.ndarray) -> np.uint64:
    """NumPy's `pcg64_next32`: the buffered upper half if there is one, else the lower half
    of a new output, its upper half kept."""
    if state[HAS_UINT32]:
        state[HAS_UINT32] = uint64(0)
        return state[UINTEGER]
    value = next64(state)
    state[HAS_UINT32] = uint64(1)
    state[UINTEGER] = value >> uint64(32)
    return value & _LOW32
