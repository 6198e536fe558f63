"""Leader election among brokers through ZooKeeper (`serve --ha zk://.../PATH`), with kazoo.

Each broker holds an ephemeral sequential node under PATH/election whose data is its
tenant API addresses; the lowest sequence number leads. The election thread re-reads the
members on every change (a children watch wakes it) and once a second, so a dead leader's
node, removed by ZooKeeper when its session expires, hands over within the session timeout.

Fencing, from kazoo's connection states (read on kazoo's thread, never blocking there):
SUSPENDED (the connection dropped, the session may still live) makes `fence()` answer why,
so the broker launches nothing and accepts no offer until CONNECTED returns; LOST (the
session expired: ZooKeeper has removed our node and someone else may lead) makes a leader
step down for good (`on_deposed`), since its memory may be behind the new leader's state.
A leader whose election thread has not heard from ZooKeeper for half the session timeout (a
process paused by SIGSTOP or starved, whose session may have expired before kazoo can say
so) is fenced too, until ZooKeeper answers again.
Every state write is a transaction that checks our election node (`ZkStore`), so a leader
whose session expired while it was paused cannot write whatever it still believes.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from allocator.broker.zk_url import ZkUrl

log = logging.getLogger(__name__)

SESSION_TIMEOUT_S = 10.0  # asked of ZooKeeper (it grants between 2 and 20 ticks)
POLL_S = 1.0  # the election thread's period between watch wake-ups
MEMBER = "member_"


@dataclass(frozen=True)
class Member:
    """What a broker advertises in its election node."""

    http: str  # HOST:PORT of the HTTP tenant API
    grpc: str  # HOST:PORT of the gRPC tenant API
    pid: int = 0

    def encode(self) -> bytes:
        return json.dumps({"http": self.http, "grpc": self.grpc, "pid": self.pid}).encode()

    @staticmethod
    def decode(data: bytes) -> Member | None:
        try:
            raw = json.loads(data)
            return Member(str(raw["http"]), str(raw["grpc"]), int(raw.get("pid", 0)))
        except (ValueError, KeyError, TypeError):
            return None


def leader_of(children: list[str]) -> str | None:
    """The node that leads: the lowest sequence number (the last 10 digits of a name)."""
    members = [c for c in children if c.startswith(MEMBER) and c[-10:].isdigit()]
    return min(members, key=lambda c: int(c[-10:])) if members else None


class Leadership:
    """One broker's part in the election. `start()` connects and joins; `on_elected` runs on
    the election thread once this broker leads (the take-over: it may block), `on_deposed`
    once a leader's session is lost."""

    def __init__(
        self,
        url: ZkUrl,
        me: Member,
        on_elected: Callable[[], None],
        on_deposed: Callable[[str], None],
        session_timeout: float = SESSION_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.me = me
        self.on_elected = on_elected
        self.on_deposed = on_deposed
        self.session_timeout = session_timeout
        self.election_path = f"{url.path}/election"
        self.node: str | None = None  # our election node's full path
        self.leading = False
        self.deposed = False
        self.suspended = False  # the connection is down (set on kazoo's thread)
        self.lost = False  # our session expired while we were a member
        self.leader: Member | None = None  # the leader we know of (ourselves when leading)
        self.changes = 0  # leaderships this broker took
        self.took_over_at: float | None = None  # unix time of our last take-over
        self.confirmed = 0.0  # (monotonic) the last time ZooKeeper answered the election thread
        self.client = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, connect_timeout: float = 30.0) -> None:
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=self.url.connect_string, timeout=self.session_timeout)
        self.client.add_listener(self._state_changed)
        self.client.start(timeout=connect_timeout)
        self.client.ensure_path(self.election_path)
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Leave the election (our node goes at once, so a standby takes over without waiting
        for the session timeout) and close the session."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if self.client is not None:
            try:
                self.client.stop()
                self.client.close()
            except Exception as error:  # closing a dead connection
                log.debug("closing the ZooKeeper client: %s", error)
        self.leading = False

    # ---- what the broker asks ------------------------------------------------------------
    def fence(self) -> str | None:
        """Why this leader must not launch or accept offers now, or None."""
        if self.deposed or self.lost:
            return "ZooKeeper session lost: no longer the leader"
        if self.suspended:
            return "ZooKeeper connection suspended: launching nothing until it returns"
        if not self.leading:
            return "not the leader"
        silent = time.monotonic() - self.confirmed
        if silent > self.session_timeout / 2:
            # the process was paused (or starved) for that long: its session may have expired
            # before kazoo can say so; nothing is done until ZooKeeper answers again
            return f"ZooKeeper not heard from for {silent:.0f} s: launching nothing until it is"
        return None

    def refusal(self) -> str:
        """A standby's answer to a tenant call."""
        if self.deposed:
            return "deposed (ZooKeeper session lost), stepping down"
        leader = self.leader
        if leader is not None and not self.leading:
            return f"standby, leader at {leader.http} (gRPC {leader.grpc})"
        return "standby, no leader elected yet"

    # ---- kazoo's thread ------------------------------------------------------------------
    def _state_changed(self, state: str) -> None:
        from kazoo.protocol.states import KazooState

        if self._stop.is_set():
            return  # our own close
        if state == KazooState.SUSPENDED:
            self.suspended = True
            log.warning("ZooKeeper connection suspended%s", ": fencing" if self.leading else "")
        elif state == KazooState.LOST:
            self.suspended = True
            self.lost = True
            log.error("ZooKeeper session lost%s", ": stepping down" if self.leading else "")
        elif state == KazooState.CONNECTED:
            self.suspended = False
            log.info("ZooKeeper connected")
        self._wake.set()

    def _watch(self, _event: object = None) -> None:
        self._wake.set()

    # ---- the election thread -------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._evaluate()
            except Exception as error:  # a connection error: next wake-up tries again
                log.debug("election: %s", error)
            if self.deposed:
                return
            self._wake.wait(POLL_S)
            self._wake.clear()

    def _evaluate(self) -> None:
        if self.lost:
            if self.leading:
                self.leading = False
                self.deposed = True
                self.on_deposed("ZooKeeper session lost")
                return
            if self.suspended:
                return
            self.lost = False  # a standby with a new session joins again
            self.node = None
        if self.suspended or self._stop.is_set():
            return
        client = self.client
        assert client is not None
        if self.node is None:
            self.node = client.create(
                f"{self.election_path}/{MEMBER}", self.me.encode(), ephemeral=True,
                sequence=True, makepath=True,
            )  # fmt: skip
            log.info("joined the election as %s", self.node)
        children = client.get_children(self.election_path, watch=self._watch)
        self.confirmed = time.monotonic()
        mine = self.node.rsplit("/", 1)[1]
        if mine not in children:  # removed under us: the session must have expired
            self.node = None
            return
        first = leader_of(children)
        if first == mine:
            if not self.leading:
                self.leading = True
                self.leader = self.me
                self.changes += 1
                self.took_over_at = time.time()
                log.info("elected leader (%s)", self.node)
                self.on_elected()
            return
        if first is not None:
            data, _ = client.get(f"{self.election_path}/{first}")
            self.leader = Member.decode(data)
