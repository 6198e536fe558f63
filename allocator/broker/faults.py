"""Fault injection for tests: crash the broker at a named point, for real.

`FAIRBROKER_FAULT=after-launch` makes the process SIGKILL itself when it reaches
`point("after-launch")`, exactly as a crash there would (no cleanup, no flush). Unset, a
point costs one dictionary lookup. Tests use it to check that nothing is orphaned by a crash
between deciding and recording, without relying on timing.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "FAIRBROKER_FAULT"


def point(name: str) -> None:
    if os.environ.get(FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
