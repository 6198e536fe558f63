"""numba's `njit` with an on-disk cache that a change to any kernel source invalidates.

numba checks a cached function against its own source file only: a kernel that calls (or
inlines) a kernel of another module keeps running the old machine code after that module
changes, which crashes or decides wrongly when a shared tuple's layout moved (numba's
documented caching limitation). So the cache lives in a directory named after a digest of
every kernel source of the package (its `.py` files that mention `njit`): new sources, new
directory. The directory is `kernels-<package>-<digest>` under the package's `__pycache__`,
or under `$NUMBA_CACHE_DIR` when the operator set one, else under `~/.cache/fairbroker`;
where none of these is writable (a broker run as an unprivileged user from a checkout it
does not own), the functions are compiled in memory at their first call: the same code, only
slower to start.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba as nb
from numba.core import config as numba_config

_PREFIX = "kernels-"


def njit(function: Callable[..., Any] | None = None, **options: Any) -> Any:
    """`@njit` or `@njit(**options)` (numba's, e.g. inline="always"), cached where it can be."""
    if function is None:
        return lambda f: njit(f, **options)
    cache_dir = kernel_cache_dir(package_root(function))
    if cache_dir is None:
        return nb.njit(**options)(function)
    # numba's locator reads CACHE_DIR once, when the dispatcher is made; restore it after.
    saved = numba_config.CACHE_DIR
    numba_config.CACHE_DIR = str(cache_dir)
    try:
        return nb.njit(cache=True, **options)(function)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return nb.njit(**options)(function)
    finally:
        numba_config.CACHE_DIR = saved


def leaf(function: Callable[..., Any]) -> Any:
    """`njit` for a kernel that allocates nothing (no array, no view, no slice): compiled
    without numba's reference counting (its `_nrt=False`; numba is pinned). A call of an
    ordinary kernel increments and decrements the count of each array it is passed, with
    atomic operations: a helper over ten arrays, called once per framework a fill retires,
    spent about 85 ns a call on them and 5 ns on its work."""
    return njit(function, _nrt=False)


def package_root(function: Callable[..., Any]) -> Path:
    """The directory of the top-level package that defines `function`, or the file that
    does when that is a module of its own (a script, a test)."""
    top = sys.modules.get(function.__module__.split(".")[0])
    if top is not None and getattr(top, "__path__", None) and top.__file__:
        return Path(top.__file__).resolve().parent
    return Path(inspect.getfile(function)).resolve()


@functools.cache
def sources_digest(root: Path) -> str:
    """A digest of every kernel source under `root` (or of `root`, a file): path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
        text = path.read_bytes()
        if b"njit" in text:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(text).digest())
    return digest.hexdigest()[:16]


@functools.cache
def kernel_cache_dir(root: Path) -> Path | None:
    """The first writable cache directory for `root`'s kernels as they are now, or None."""
    label = f"{_PREFIX}{root.stem}-"  # a package's or a lone module's: each prunes its own
    name = label + sources_digest(root)
    in_tree = (root if root.is_dir() else root.parent) / "__pycache__"
    bases = [Path(numba_config.CACHE_DIR)] if numba_config.CACHE_DIR else [in_tree]
    user = _user_cache()
    if user is not None:
        bases.append(user / "fairbroker")
    for base in bases:
        if _writable(base / name):
            if base == in_tree:
                _prune_stale(in_tree, label, keep=name)
            return base / name
    return None


def _user_cache() -> Path | None:
    """The user's own cache directory; never a shared one such as /tmp, where another user
    could leave machine code (numba's cache files are pickles) for the broker to load."""
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError:  # no home directory
        return None


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def _prune_stale(base: Path, label: str, keep: str) -> None:
    """Remove the checkout's caches of earlier sources (best effort: another may be busy)."""
    for stale in base.glob(label + "*"):
        if stale.name != keep:
            shutil.rmtree(stale, ignore_errors=True)
