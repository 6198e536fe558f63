"""allocator.jit.njit: cached where it can be, in a directory its kernel sources name, so a
change to a kernel that another calls is never served from the old cache."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import numba as nb
import numpy as np
import pytest

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


def test_with_a_locator_it_caches_under_the_sources_digest():
    before = jit.numba_config.CACHE_DIR
    compiled = jit.njit(_twice)
    assert before == jit.numba_config.CACHE_DIR  # numba's setting is restored
    assert compiled(4) == 8
    assert compiled._cache.__class__.__name__ == "FunctionCache"
    path = Path(compiled._cache._cache_path)
    root = jit.package_root(_twice)
    assert f"kernels-{root.stem}-{jit.sources_digest(root)}" in path.parts


def test_a_module_loaded_from_its_file_alone_is_cached_beside_it(tmp_path):
    # Not in sys.modules (importlib from a path): its own file is the sources.
    script = tmp_path / "lone.py"
    script.write_text("from allocator.jit import njit\n\n@njit\ndef three():\n    return 3\n")
    spec = importlib.util.spec_from_file_location("lone_kernels", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.three() == 3
    (cache,) = (tmp_path / "__pycache__").glob("kernels-lone-*")
    assert cache.name == f"kernels-lone-{jit.sources_digest(script.resolve())}"


def test_nothing_writable_compiles_in_memory(tmp_path, monkeypatch):
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")  # no one, root included, makes a directory under a file
    monkeypatch.setattr(jit.numba_config, "CACHE_DIR", str(not_a_directory / "numba"))
    monkeypatch.setattr(jit, "_user_cache", lambda: None)
    assert jit.kernel_cache_dir.__wrapped__(tmp_path) is None


_CALLER = """
from allocator.jit import njit
from kernels_pkg import callee

@njit
def caller():
    return callee.value()
"""

_CALLEE = """
from {module} import njit

@njit
def value():
    return {value}
"""


def _run_twice(tmp_path: Path, module: str) -> list[str]:
    """Run caller() in a fresh interpreter, change only the callee's file, run it again."""
    package = tmp_path / "kernels_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    caller = _CALLER.replace("allocator.jit", module)
    (package / "caller.py").write_text(textwrap.dedent(caller))
    checkout = Path(jit.__file__).parents[1]
    answers = []
    for value in (1, 2):  # same length: the file's size does not change either
        (package / "callee.py").write_text(_CALLEE.format(module=module, value=value))
        done = subprocess.run(
            [sys.executable, "-c", "from kernels_pkg.caller import caller; print(caller())"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            # No .pyc: the two callees have the same size and may have the same mtime
            # second, and Python would load the first one's bytecode for the second.
            env={
                "PYTHONPATH": f"{tmp_path}:{checkout}",
                "HOME": str(tmp_path),
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )
        answers.append(done.stdout.strip())
    return answers


def test_a_changed_callee_is_recompiled_into_its_caller(tmp_path):
    assert _run_twice(tmp_path / "ours", "allocator.jit") == ["1", "2"]
    caches = list((tmp_path / "ours" / "kernels_pkg" / "__pycache__").glob("kernels-*"))
    assert len(caches) == 1, caches  # the first sources' cache was pruned
    assert list(caches[0].rglob("*.nbi"))


def test_numbas_own_cache_would_serve_the_stale_callee(tmp_path):
    # The failure the digest prevents: if numba ever tracks dependencies itself, this fails
    # and allocator.jit's digest can go.
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "plain_jit.py").write_text(
        "import numba\n\ndef njit(f):\n    return numba.njit(cache=True)(f)\n"
    )
    assert _run_twice(tmp_path / "plain", "plain_jit") == ["1", "1"]


def _fill_and_double(a, i):  # type: ignore[no-untyped-def]
    a[i] = 1.0
    return a[i] * 2


def _allocates(n):  # type: ignore[no-untyped-def]
    return np.zeros(n)


def test_a_leaf_kernel_writes_arrays_and_may_not_allocate():
    """`leaf` drops numba's reference counting: an allocation there is a typing error,
    not a leak or a crash at run time."""
    a = np.zeros(3)
    assert jit.leaf(_fill_and_double)(a, 1) == 2.0
    assert a.tolist() == [0.0, 1.0, 0.0]
    with pytest.raises(nb.core.errors.TypingError):
        jit.leaf(_allocates)(3)
