"""One throwaway allocation of a configuration, to compile its kernels before a live broker
serves anyone.

numba compiles a kernel at its first call, or loads it from its on-disk cache, holding the
GIL. On a cold cache that takes seconds, more on a busy machine, and a live broker that
compiles mid-run answers no tenant meanwhile: in a fresh clone's `make test` two Spark
drivers were seen to have "sent nothing for 38 s" against a 30 s lease, and their executors
were replaced. A broker therefore runs this at start, before it recovers tenants or takes
calls; with a warm cache it costs milliseconds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from allocator.engine import Engine
from allocator.engine_config import EngineConfig

log = logging.getLogger(__name__)

#: Two agents of different shapes, and three tenants in three roles with different demands,
#: the last not declaring it (in characterized mode a run that meets it is made the usual
#: way, not from the engine's arrays: `engine_direct`): enough for every selector and
#: criterion to take its compiled paths at least once.
AGENTS = ({"cpus": 4.0, "mem": 4096.0}, {"cpus": 8.0, "mem": 2048.0})
TENANTS = (("warm-a", {"cpus": 1.0, "mem": 256.0}, None),
           ("warm-b", {"cpus": 0.5, "mem": 768.0}, None),
           ("warm-c", {"cpus": 0.5, "mem": 512.0}, False))  # fmt: skip


def warm(config: EngineConfig, resources: Sequence[str]) -> float:
    """Allocate, release one task, allocate again on a small engine of `config`; the
    seconds it took. Never raises: a failure here only means the kernels compile later."""
    started = time.perf_counter()
    try:
        engine = Engine(tuple(resources), config)
        for i, amounts in enumerate(AGENTS):
            engine.add_agent(f"warm-{i}", {r: amounts.get(r, 1.0) for r in resources})
        for name, demand, declared in TENANTS:
            engine.register(name, {r: demand.get(r, 0.0) for r in resources}, role=name,
                            target=3, declared=declared, require_fit=False)  # fmt: skip
        grants = engine.allocate(0.0)
        if grants:
            engine.release(grants[0].framework, grants[0].agent, 1)
        engine.allocate(config.interval)
    except Exception:
        log.warning("engine warm-up failed; kernels compile at the first run", exc_info=True)
    return time.perf_counter() - started
