"""numba's `njit` with its on-disk cache where it can have one.

numba caches compiled code next to the source (`__pycache__`); where that is not writable
and no other locator applies (a broker run as an unprivileged user from a checkout it does
not own), `njit(cache=True)` fails when the module is imported. There the functions are
compiled in memory at their first call instead: the same code, only slower to start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba as nb


def njit(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@njit` or `@njit(**options)` (numba's, e.g. inline="always"), cached where it can be."""
    if function is None:
        return lambda f: njit(f, **options)
    try:
        return nb.njit(cache=True, **options)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return nb.njit(**options)(function)
