"""The broker's allocation loop: a thread that runs the engine every interval and at once when
poked, and can say when it has died or stalled (for /healthz)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: A loop with no completed run for 2 intervals plus this long is reported as stalled.
STALL_GRACE_SECONDS = 30.0


class AllocationLoop:
    def __init__(self, run: Callable[[], object], interval: Callable[[], float]) -> None:
        self._run = run  # one allocation run; what it raises is logged and survived
        self._interval = interval  # read at every tick: `configure` may change it
        self._wake = threading.Event()
        self.stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_run = time.monotonic()  # the last completed run
        self._error: str | None = None  # what ended the thread

    def start(self) -> None:
        self._last_run = time.monotonic()
        self._thread = threading.Thread(target=self._body, name="allocation", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def poke(self) -> None:
        """Run as soon as the current run (if any) ends."""
        self._wake.set()

    def problem(self) -> str | None:
        """Why the loop is unhealthy, or None (also when it was never started: runs driven
        by hand, in tests, or while stopping)."""
        if self._thread is None or self.stopping.is_set():
            return None
        if not self._thread.is_alive():
            return f"the allocation loop stopped: {self._error or 'its thread exited'}"
        interval = self._interval()
        idle = time.monotonic() - self._last_run
        if idle > 2 * interval + STALL_GRACE_SECONDS:
            return (
                f"the allocation loop has completed no run for {idle:.0f} s "
                f"(interval {interval:g} s)"
            )
        return None

    def _body(self) -> None:
        """What ends the thread other than stop() is kept for problem()."""
        try:
            self._runs()
        except BaseException as error:
            self._error = f"{type(error).__name__}: {error}"
            log.critical("the allocation loop stopped: %s", self._error, exc_info=True)

    def _runs(self) -> None:
        next_tick = time.monotonic()
        while not self.stopping.is_set():
            self._wake.wait(timeout=max(0.0, next_tick - time.monotonic()))
            if self.stopping.is_set():
                return
            self._wake.clear()
            if time.monotonic() >= next_tick:
                next_tick = time.monotonic() + self._interval()
            try:
                self._run()
            except Exception:  # the loop must survive anything one run does
                log.exception("allocation run failed")
            else:
                self._last_run = time.monotonic()
