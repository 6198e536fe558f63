"""The broker's link to the Mesos master: the framework's identity (its FrameworkInfo and
the id it re-subscribes with), the subscription (calls are sent only while subscribed),
heartbeats, SUPPRESS / REVIVE as the master has them, the master's agent list, and the
link's state for metrics, `fairbroker status` and `/healthz` (`MesosLink`).
"""

from __future__ import annotations

import getpass
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from allocator.backends.mesos.options import MesosOptions
from allocator.errors import FairbrokerError

log = logging.getLogger(__package__)
DRIVER_STOP_S = 10.0  # at most this long for pymesos's I/O thread to finish (and TEARDOWN)
TEARDOWN_CONFIRM_S = 15.0  # at most this long for the master to show the framework gone
# A refused subscription: pymesos subscribes again at once, and a master that removed the
# framework refuses hundreds of times a second. The same refusal is logged at most this
# often, and the master asked at most this often whether it removed the framework.
REFUSAL_EVERY_S = 10.0
# /healthz says "not ready" while the broker's own tasks are unconfirmed after a
# (re-)subscription, for at most this long: the master answers a RECONCILE at once for every
# task it or a registered agent knows; reconciliation goes on afterwards (RECONCILE_MAX_S).
UNCONFIRMED_HEALTH_S = 120.0
FRAMEWORK_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|secs|mins|hrs|days|weeks)\s*")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "secs": 1.0, "mins": 60.0, "hrs": 3600.0,
                 "days": 86400.0, "weeks": 604800.0}  # fmt: skip


def mesos_seconds(text: object) -> float | None:
    """A Mesos duration flag ("15secs", "2mins", "100ms") in seconds; None if it is not one."""
    match = _DURATION.fullmatch(str(text))
    return float(match[1]) * _UNIT_SECONDS[match[2]] if match else None


def agent_silence_seconds(flags: dict) -> float | None:
    """How long an agent goes without the master's pings before it looks for a new master:
    agent_ping_timeout x max_agent_ping_timeouts, from the master's /master/flags."""
    timeout = mesos_seconds(flags.get("agent_ping_timeout"))
    try:
        pings = int(flags.get("max_agent_ping_timeouts", ""))
    except ValueError:
        return None
    return None if timeout is None or pings < 1 else timeout * pings


@dataclass(frozen=True)
class LinkState:
    connected: bool
    framework_id: str | None
    since: float  # unix seconds: subscribed at, or disconnected (or started) at
    last_event: float | None  # unix seconds of the master's last event (None: never)


class MesosLink:
    """The state of the link: subscribed (as which framework, since when) or not (since
    when), and when the master last said anything. Wall-clock times, because they are shown
    to people and exported. Updated from pymesos's callbacks, read from any thread."""

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


class FrameworkIdFile:
    """The framework id, kept in the state directory across broker restarts."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / "mesos-framework-id"

    def load(self) -> str | None:
        """The id to re-subscribe with; an unreadable file is an error (a silent new
        framework would orphan every task of the old one)."""
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as error:
            raise FairbrokerError(
                f"{self.path}: cannot read the Mesos framework id ({error})"
            ) from None
        if text and not FRAMEWORK_ID.fullmatch(text):
            raise FairbrokerError(f"{self.path}: not a Mesos framework id: {text[:80]!r}")
        return text or None

    def save(self, framework_id: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{framework_id}\n")

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)


class Subscription:
    """The framework's subscription through a pymesos driver. Not thread-safe by itself:
    the backend calls it under its lock (heartbeats and the link state excepted)."""

    def __init__(
        self,
        options: MesosOptions,
        scheduler: Any,
        driver_factory: Callable[..., Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self._scheduler = scheduler  # what pymesos calls back
        self._driver_factory = driver_factory
        self._clock = clock
        self.driver: Any = None
        self.link = MesosLink()  # for metrics, status and health
        self.subscribed = False  # SUBSCRIBED received on the current stream
        self.subscribed_at = clock()  # (monotonic) when the current subscription began
        self.suppressed = False  # as the master has it (a SUBSCRIBE resets it)
        self.has_agents: bool | None = None  # does the master have agents (None: unknown)
        self.next_look = 0.0  # when to read the master's agent list next
        self.last_heartbeat = clock()
        self.refusal: str | None = None  # the master's last ERROR event, until looked at
        self._refusal_logged: tuple[str, float] | None = None
        self._removed_asked_at: float | None = None
        self.id_file = FrameworkIdFile(options.state_dir)
        self.framework_id: str | None = self.id_file.load()

    def framework_info(self) -> dict:
        options = self.options
        info: dict[str, Any] = {
            "user": options.user or getpass.getuser(),
            "name": options.framework_name,
            "failover_timeout": options.failover_timeout,
            "checkpoint": True,
            # declared in full: pymesos would add GPU_RESOURCES on its own
            "capabilities": [{"type": "MULTI_ROLE"}]
            + ([{"type": "GPU_RESOURCES"}] if options.gpus else []),
            "roles": list(options.roles),
        }
        for key in ("hostname", "webui_url"):
            if getattr(options, key):
                info[key] = getattr(options, key)
        if options.principal:
            info["principal"] = options.principal
        if self.framework_id:
            info["id"] = {"value": self.framework_id}
        return info

    def connect(self) -> None:
        self.subscribed = False
        if self.framework_id is None:  # kept elsewhere (--ha) and read only now, or never set
            self.framework_id = self.id_file.load()
        self.driver = self._driver_factory(self._scheduler, self.framework_info(), self.options)
        self.last_heartbeat = self._clock()
        self.driver.start()

    def reconnect(self) -> None:
        """After missed heartbeats: a new driver, subscribing with the same framework id."""
        self.link.disconnected()
        try:
            self.driver.stop(failover=True)
            self.connect()
        except Exception as error:  # one line per attempt; the traceback at debug
            log.warning("reconnecting to the Mesos master failed: %s", error)
            log.debug("reconnect failure", exc_info=True)
            self.last_heartbeat = self._clock()

    def registered(self, framework_id: str) -> None:
        """SUBSCRIBED as a new framework: its id is kept for the next start."""
        self.framework_id = framework_id
        self.id_file.save(framework_id)

    def subscribed_again(self) -> None:
        """A new subscription: the master reset this framework's suppression (pymesos sends
        no suppressed_roles) and its agents are read again at once."""
        self.link.subscribed(self.framework_id)
        self.subscribed = True
        self.subscribed_at = self._clock()
        self.suppressed = False  # the next flush SUPPRESSes again if nothing is pending
        self.has_agents = None
        self.next_look = 0.0

    def lost(self) -> bool:
        """The stream is gone; whether it had been subscribed."""
        was_subscribed, self.subscribed = self.subscribed, False
        return was_subscribed

    def heard(self, heartbeat: bool = True) -> None:
        """Something from the master: a heartbeat or offers count as one."""
        if heartbeat:
            self.last_heartbeat = self._clock()
        self.link.event()

    def heartbeats_missed(self) -> bool:
        return self._clock() - self.last_heartbeat > self.options.heartbeat_timeout

    def call(self, name: str, *args: Any) -> bool:
        """A call to the master; an error answer is logged and reported as False, never
        raised into the allocation loop. Before SUBSCRIBED pymesos drops calls silently (or
        fails an assertion), so nothing is sent then and the call counts as not made."""
        if not self.subscribed or not getattr(self.driver, "connected", True):
            log.debug("Mesos call %s not sent: not subscribed", name)
            return False
        try:
            getattr(self.driver, name)(*args)
        except Exception as error:
            # pymesos puts the request body (task environments) after the first line
            first = str(error).split("\n", 1)[0][:300]
            log.error("Mesos call %s failed: %s", name, first)
            return False
        return True

    def want_offers(self, wants_more: bool) -> None:
        """SUPPRESS when no executor is pending, REVIVE when demand returns."""
        if not wants_more and not self.suppressed:
            self.suppressed = self.call("suppressOffers")
        elif wants_more and self.suppressed:
            self.suppressed = not self.call("reviveOffers")

    def look_due(self, now: float) -> bool:
        """Time to read the master's agent list (and when the next time is)."""
        look = self.subscribed and now >= self.next_look
        if look:
            self.next_look = now + self.options.agents_look_seconds
        return look

    def _master_json(self, master: str | None, endpoint: str, timeout: float = 10) -> Any:
        """The answer of the master's `endpoint` (e.g. `/master/state`); None when unknown."""
        if not master:
            return None
        try:
            answer = requests.get(
                f"http://{master}{endpoint}", timeout=timeout, auth=self.options.http_auth
            )
            answer.raise_for_status()
            return answer.json()
        except (requests.RequestException, ValueError) as error:
            log.warning("cannot read the Mesos master's %s: %s", endpoint, error)
            return None

    def master_agents(self) -> list[dict] | None:
        """The leading master's agents (`/master/slaves`); None when unknown. A master
        restarted without its registry (no ZooKeeper, in-memory registry) has none."""
        answer = self._master_json(getattr(self.driver, "master", None), "/master/slaves")
        return answer.get("slaves", []) if isinstance(answer, dict) else None

    def master_flags(self) -> dict | None:
        """The leading master's flags (`/master/flags`); None when unknown."""
        answer = self._master_json(getattr(self.driver, "master", None), "/master/flags")
        flags = answer.get("flags") if isinstance(answer, dict) else None
        return flags if isinstance(flags, dict) else None

    def refused(self, message: str) -> bool:
        """An ERROR event: the master refused the subscription (e.g. a framework it removed
        cannot subscribe again; pymesos retries regardless). Returns whether to log it: not
        when the same refusal was logged less than REFUSAL_EVERY_S ago."""
        self.refusal = message
        now = self._clock()
        last = self._refusal_logged
        if last is not None and last[0] == message and now - last[1] < REFUSAL_EVERY_S:
            return False
        self._refusal_logged = (message, now)
        return True

    def removed_for_good(self) -> bool:
        """After a refusal (the master asked at most every REFUSAL_EVERY_S): whether the
        master lists this framework as completed (torn down, or away longer than its failover
        timeout, its tasks killed). Such an id can never subscribe again: it is forgotten, and
        the next `connect` registers a new framework."""
        now = self._clock()
        asked = self._removed_asked_at
        if self.refusal is None or (asked is not None and now - asked < REFUSAL_EVERY_S):
            return False
        self.refusal, self._removed_asked_at = None, now
        if not self.completed_at_master():
            return False
        log.error(
            "the Mesos master removed framework %s for good (torn down, or away longer than "
            "its failover timeout; the master killed its tasks): registering as a new "
            "framework", self.framework_id,
        )  # fmt: skip
        self.id_file.forget()
        self.framework_id = None
        return True

    def _framework_ids(self, master: str | None, timeout: float = 10) -> dict[str, set] | None:
        """The ids of the master's live ("frameworks") and "completed_frameworks"
        (`/master/state`); None when unknown."""
        state = self._master_json(master, "/master/state", timeout)
        if not isinstance(state, dict):
            return None
        return {key: {f.get("id") for f in state.get(key, [])}
                for key in ("frameworks", "completed_frameworks")}  # fmt: skip

    def completed_at_master(self) -> bool:
        """The master lists this framework among its completed ones (torn down, or removed
        once its failover timeout passed) and not among the live ones: it is gone for good.
        False when the master cannot say (unreachable, or restarted without that history)."""
        ids = self._framework_ids(getattr(self.driver, "master", None))
        if ids is None or self.framework_id is None:
            return False
        return self.framework_id in ids["completed_frameworks"] - ids["frameworks"]

    def health(self, unconfirmed: int) -> dict[str, object]:
        """The broker's /healthz answer: the link's, and unhealthy also while the master
        the broker is subscribed to has no agents (restarted without its registry), and
        while some of the broker's tasks are unconfirmed since this subscription, for at
        most UNCONFIRMED_HEALTH_S (a task the master never reports, whatever the
        reconciliation, does not keep the broker unhealthy for ever; it stays counted)."""
        report = self.link.health()
        if self.subscribed and self.has_agents is False and report["ok"]:
            report.update(ok=False, reason="subscribed, but the Mesos master has no agents")
        waited = self._clock() - self.subscribed_at
        if self.subscribed and unconfirmed and report["ok"] and waited < UNCONFIRMED_HEALTH_S:
            report.update(
                ok=False,
                reason=f"{unconfirmed} tasks unconfirmed since re-subscription {waited:.0f} s "
                f"ago (reconciling; healthy regardless after {UNCONFIRMED_HEALTH_S:.0f} s)",
            )
        report["unreconciled_tasks"] = unconfirmed
        return report

    def stop(self, kill_executors: bool) -> bool:
        """Stop the driver; `kill_executors`: TEARDOWN. Returns whether the framework is
        known to be gone: a failover never is, a TEARDOWN only once the master shows it (a
        master may refuse it, e.g. when another scheduler holds the subscription): only then
        is the saved id forgotten, so an unconfirmed teardown can be retried."""
        master = getattr(self.driver, "master", None)  # the leader, before the driver forgets
        # failover=True keeps the framework (and its tasks) for a restarted broker; a torn
        # down framework's id cannot subscribe again, so it is forgotten
        self.driver.stop(failover=not kill_executors)
        # pymesos sends TEARDOWN from its I/O thread on the way out: wait for it, or a
        # process that exits right after (`fairbroker teardown`, serve --teardown-on-exit)
        # may end before the master hears it
        wait = getattr(self.driver, "wait_stopped", None)
        if wait is not None and not wait(DRIVER_STOP_S):
            log.warning("the Mesos driver did not stop within %.0f s", DRIVER_STOP_S)
        if not kill_executors:
            return False
        if self.framework_id is None or self._gone_from(master, self.framework_id):
            self.id_file.forget()
            return True
        log.error(
            "the Mesos master at %s still has framework %s after TEARDOWN: its id is kept in %s",
            master, self.framework_id, self.id_file.path,
        )  # fmt: skip
        return False

    def _gone_from(self, master: str | None, framework_id: str) -> bool:
        """The master's /master/state lists the framework as completed, or not at all."""
        if not master:
            return False
        deadline = time.monotonic() + TEARDOWN_CONFIRM_S
        while True:
            ids = self._framework_ids(master, timeout=5)
            if ids is not None and framework_id not in ids["frameworks"]:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)
