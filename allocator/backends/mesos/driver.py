"""The pymesos scheduler driver as the broker uses it: calls that keep what pymesos drops
(agent ids in KILL and RECONCILE), the capabilities exactly as declared, a back-off between
the master's redirects, and pymesos's log lines once each, a socket error on one line."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from allocator.backends.mesos.options import MesosOptions

REDIRECT_FIRST_S = 0.2  # back-off between the master's 307s (pymesos has none)
REDIRECT_MAX_S = 5.0


class _SocketErrorsOnOneLine(logging.Filter):
    """pymesos logs a failed send or receive with logger.exception: a traceback on every
    reconnect attempt. A socket error becomes one line with the error's text; any other
    exception (a bug, in pymesos or in a callback) keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, OSError):
            record.msg = f"{record.getMessage()}: {error.strerror or error}"
            record.args = None
            record.exc_info = record.exc_text = None
        return True


def pymesos_driver(scheduler: Any, framework: dict, options: MesosOptions) -> Any:
    import pymesos
    from pymesos import MesosSchedulerDriver

    # pymesos adds its own stderr handler to its logger, which also propagates to the
    # root logger: every line twice. The application's logging configuration decides.
    logging.getLogger(pymesos.__name__).handlers.clear()
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if (
            name.split(".")[0] == pymesos.__name__
            and isinstance(logger, logging.Logger)
            and not any(isinstance(f, _SocketErrorsOnOneLine) for f in logger.filters)
        ):
            logger.addFilter(_SocketErrorsOnOneLine())

    class Driver(MesosSchedulerDriver):
        @property
        def framework(self) -> dict:
            return dict(self._framework)  # as given: no capability added, no default timeout

        def wait_stopped(self, timeout: float) -> bool:
            thread = self._io_thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout)
            return thread is None or not thread.is_alive()

        def killTask(
            self, task_id: dict, agent_id: dict | None = None, kill_policy: dict | None = None
        ) -> None:
            # pymesos drops the agent id (the master needs it to forward a KILL for a task it
            # does not know: one of an agent that was removed and came back) and has no
            # kill_policy (the grace between SIGTERM and SIGKILL)
            kill = {"task_id": task_id} | ({"agent_id": agent_id} if agent_id else {})
            if kill_policy:
                kill["kill_policy"] = kill_policy
            self._framework_call("KILL", kill=kill)

        def reconcileTasks(self, tasks: list[dict]) -> None:
            self._framework_call("RECONCILE", reconcile={"tasks": tasks})  # agent ids kept

        def _framework_call(self, kind: str, **body: Any) -> None:
            if not self.connected or not self.framework_id:
                raise RuntimeError(f"{kind} before SUBSCRIBED")
            self._send({"type": kind, "framework_id": {"value": self.framework_id}, **body})

        def change_master(self, master: str) -> None:
            # A 307 from a master that is not (yet) the leader sends pymesos straight back:
            # hundreds of redirects a second during an election. Back off between them.
            now = time.monotonic()
            last, delay = getattr(self, "_redirected", (0.0, 0.0))
            if now - last < REDIRECT_MAX_S:
                delay = min(max(delay * 2, REDIRECT_FIRST_S), REDIRECT_MAX_S)
                time.sleep(delay)
            else:
                delay = 0.0
            self._redirected = (time.monotonic(), delay)
            super().change_master(master)

    return Driver(
        scheduler,
        framework,
        options.master,
        use_addict=False,
        implicit_acknowledgements=False,
        principal=options.principal,
        secret=options.secret,
        failover=True,
    )
