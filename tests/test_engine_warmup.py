"""The broker's start-up warm-up compiles the kernels its runs use, and never fails a start."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from allocator.engine_config import EngineConfig
from allocator.engine_warmup import warm


def test_warm_up_compiles_bf_drfs_compiled_fill() -> None:
    """In a fresh interpreter (this one may have compiled them already): nothing before the
    warm-up, BF-DRF's compiled fill after it, both as the usual run calls it (drawing on a
    Generator) and inside the run from the engine's arrays (`engine_direct._run`; the fill
    it calls is compiled with it, or comes with it from the cache)."""
    script = (
        "from numba import types\n"
        "from allocator import engine_bulk, engine_direct\n"
        "from allocator.engine_config import EngineConfig\n"
        "from allocator.engine_warmup import warm\n"
        "def usual():\n"
        "    return sum(isinstance(s[-1], types.NumPyRandomGeneratorType)\n"
        "               for s in engine_bulk._fill.signatures)\n"
        "before = [usual(), len(engine_direct._run.signatures)]\n"
        "warm(EngineConfig('bfdrf'), ('cpus', 'mem'))\n"
        "print(*before, usual(), len(engine_direct._run.signatures))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600, check=True)  # fmt: skip
    assert done.stdout.split() == ["0", "0", "1", "1"], done.stdout + done.stderr


@pytest.mark.parametrize("name", ["drf", "psdsf", "rpsdsf", "tsf", "bfdrf"])
@pytest.mark.parametrize("mode", ["characterized", "oblivious"])
def test_warm_up_runs_every_scheduler_without_a_warning(name, mode, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="allocator.engine_warmup"):
        warm(EngineConfig(name, mode=mode), ("cpus", "mem", "disk"))
    assert not caplog.records


def test_a_failing_warm_up_is_logged_not_raised(caplog, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel today")

    monkeypatch.setattr("allocator.engine_warmup.Engine.allocate", broken)
    with caplog.at_level(logging.WARNING, logger="allocator.engine_warmup"):
        warm(EngineConfig("drf"), ("cpus", "mem"))
    assert "warm-up failed" in caplog.text
