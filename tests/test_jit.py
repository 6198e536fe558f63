"""allocator.jit.njit: cached where numba can cache, compiled in memory where it cannot."""

from __future__ import annotations

import numba as nb

from allocator import jit


def _twice(x: int) -> int:
    return 2 * x


def test_without_a_cache_locator_it_compiles_in_memory(monkeypatch):
    real = nb.njit

    def no_locator(*args, **kwargs):
        if kwargs.get("cache"):
            raise RuntimeError("cannot cache function '_twice': no locator available")
        return real(*args, **kwargs)

    monkeypatch.setattr(jit.nb, "njit", no_locator)
    compiled = jit.njit(_twice)
    assert compiled(21) == 42
    assert not compiled._cache.__class__.__name__.startswith("FunctionCache")
    inlined = jit.njit(inline="always")(_twice)  # numba's own options pass through
    assert inlined(5) == 10 and inlined.targetoptions["inline"] == "always"


def test_with_a_locator_it_caches():
    compiled = jit.njit(_twice)
    assert compiled(4) == 8
    assert compiled._cache.__class__.__name__ == "FunctionCache"
