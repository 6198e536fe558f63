"""A start barrier for a live batch: the broker grants nothing until every driver of the
batch's first wave has registered, then decides among all of them at once.

Without it the first driver to register (drivers start seconds apart on a loaded machine)
finds the cluster empty and takes all it asks for alone, under any scheduler, so a
comparison of schedulers measures arrival order. With it every scheduler decides among all
the batch's tenants at once, as in paper 002's experiment (every queue has a job waiting
when resources come free) and as the simulator runs the batch (all first jobs arrive
together).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class HoldingBroker(Protocol):
    """What the gate uses of allocator.broker.core.Broker."""

    tenants: dict

    def hold_grants(self, held: bool) -> None: ...


class StartGate:
    """Close with `close()` before the drivers start; a thread opens the gate when
    `expected` tenants have registered or after `timeout` seconds, whichever comes first."""

    def __init__(self, broker: HoldingBroker, expected: int, timeout: float) -> None:
        self.broker = broker
        self.expected = expected
        self.timeout = timeout
        self.opened_after: float | None = None  # seconds from close() to open
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def close(self) -> None:
        self.broker.hold_grants(True)
        closed_at = time.monotonic()
        self._thread = threading.Thread(
            target=self._watch, args=(closed_at,), name="fairbroker-start-gate", daemon=True
        )
        self._thread.start()

    def _watch(self, closed_at: float) -> None:
        deadline = closed_at + self.timeout
        while not self._stop.wait(0.1):
            if len(self.broker.tenants) >= self.expected or time.monotonic() >= deadline:
                self.broker.hold_grants(False)
                self.opened_after = time.monotonic() - closed_at
                return

    def stop(self) -> None:
        """Stop watching (a batch that ends or is interrupted before the gate opened leaves
        it closed: the broker is being stopped)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
