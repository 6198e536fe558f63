"""The state of the broker's link to the Mesos master, for metrics, `fairbroker status` and
`/healthz`: subscribed (as which framework, since when) or not (since when), and when the
master last said anything. Wall-clock times, because they are shown to people and exported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LinkState:
    connected: bool
    framework_id: str | None
    since: float  # unix seconds: subscribed at, or disconnected (or started) at
    last_event: float | None  # unix seconds of the master's last event (None: never)


class MesosLink:
    """Updated from pymesos's callbacks, read from any thread."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._state = LinkState(False, None, clock(), None)

    def subscribed(self, framework_id: str | None) -> None:
        now = self._clock()
        with self._lock:
            self._state = LinkState(True, framework_id, now, now)

    def disconnected(self) -> None:
        with self._lock:
            if self._state.connected:
                self._state = LinkState(
                    False, self._state.framework_id, self._clock(), self._state.last_event
                )

    def event(self) -> None:
        """Anything from the master (heartbeat, offers, updates) on the current stream."""
        now = self._clock()
        with self._lock:
            s = self._state
            self._state = LinkState(s.connected, s.framework_id, s.since, now)

    def state(self) -> LinkState:
        with self._lock:
            return self._state

    def health(self) -> dict[str, object]:
        """The broker's /healthz answer: healthy only while subscribed."""
        s = self.state()
        report: dict[str, object] = {"ok": s.connected, "mesos": self.describe()}
        if not s.connected:
            report["reason"] = f"not subscribed to the Mesos master: {self.describe()}"
        return report

    def describe(self) -> str:
        """One line for `fairbroker status`."""
        s = self.state()
        if s.connected:
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(s.since))
            return f"subscribed as framework {s.framework_id} since {since}"
        gone = max(0.0, self._clock() - s.since)
        return f"disconnected for {gone:.0f} s" + (
            f" (framework {s.framework_id})" if s.framework_id else " (never subscribed)"
        )
