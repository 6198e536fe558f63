"""The book of offers the broker holds: each well-formed offer held under its engine agent,
malformed ones declined, declines that failed kept (still outstanding at the master), and
what the broker may use on each engine agent (its held offers plus its own tasks there)
reported to the broker as `agent_added` / `capacity_changed`.

Not thread-safe by itself: the backend calls it under its lock. Only `capacity` takes that
lock, as the broker reads a report's capacity when it applies it, from its own thread.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping
from dataclasses import dataclass

from allocator.backends.base import AgentInfo, BackendEvents
from allocator.backends.mesos.options import MesosOptions

log = logging.getLogger(__package__)

#: A call to the master (name, arguments): False when it was not made or failed.
MasterCall = Callable[..., bool]


@dataclass
class Offer:
    offer_id: str
    agent_id: str
    hostname: str
    role: str
    resources: dict[str, float]
    attributes: dict[str, str]


def scalars(resources: list[dict], role: str | None = None) -> dict[str, float]:
    """Scalar resources of a v1 resource list (optionally only those allocated to `role`)."""
    out: dict[str, float] = {}
    for r in resources:
        if r.get("type", "SCALAR") != "SCALAR" or "scalar" not in r:
            continue
        allocated = r.get("allocation_info", {}).get("role")
        if role is not None and allocated not in (None, role):
            continue
        out[r["name"]] = out.get(r["name"], 0.0) + float(r["scalar"]["value"])
    return out


def attributes(offer: dict) -> dict[str, str]:
    out = {}
    for a in offer.get("attributes", []):
        kind = a.get("type", "TEXT").lower()
        value = a.get(kind, {})
        out[a["name"]] = str(value.get("value", value))
    return out


def parse_offer(raw: dict, default_role: str) -> Offer:
    """An offer as the book holds it; raises (KeyError, TypeError, ValueError,
    AttributeError) on a malformed one."""
    role = raw.get("allocation_info", {}).get("role", default_role)
    hostname = raw.get("hostname")
    if not isinstance(hostname, str) or not hostname:
        raise ValueError("no hostname")
    resources = scalars(raw.get("resources", []), role)
    for name, value in resources.items():
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"resource {name!r}: {value}")
    return Offer(
        offer_id=str(raw["id"]["value"]),
        agent_id=str(raw["agent_id"]["value"]),
        hostname=hostname,
        role=role,
        resources=resources,
        attributes=attributes(raw),
    )


def offer_id_of(raw: object) -> str | None:
    try:
        return str(raw["id"]["value"])  # type: ignore[index]
    except (KeyError, TypeError):
        return None


class OfferBook:
    """Offers held, the engine agents they made known, and the capacity reports to the
    broker (queued in `outbox`, sent by the backend once its lock is released)."""

    def __init__(
        self,
        options: MesosOptions,
        call: MasterCall,
        tasks_on: Callable[[str], Iterable[Mapping[str, float]]],
        lock: threading.RLock,
    ) -> None:
        self.options = options
        self._call = call
        self._tasks_on = tasks_on  # the resources of each of the broker's tasks on an agent
        self._lock = lock
        self.events: BackendEvents | None = None
        self.held: dict[str, Offer] = {}
        self.agents: dict[str, AgentInfo] = {}  # engine agent key -> info
        self.announced: set[str] = set()  # agents whose `agent_added` has been queued
        self.counts = dict.fromkeys(("received", "accepted", "declined", "rescinded"), 0)
        self.last_offered: dict[str, dict[str, float]] = {}  # engine agent -> total
        self.undeclined: set[str] = set()  # offers whose DECLINE failed (still outstanding)
        # malformed offers (never usable) whose DECLINE failed: declined again at each flush
        self.bad_undeclined: set[str] = set()
        self.outbox: list[Callable[[], None]] = []

    def key(self, offer: Offer) -> str:
        return self.options.agent_key(offer.agent_id, offer.role)

    def receive(self, raw: dict) -> Offer | None:
        """Hold one offer of a resourceOffers event and report its agent's capacity; a
        malformed one costs only itself: it is declined (None)."""
        try:
            offer = parse_offer(raw, self.options.roles[0])
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            offer_id = offer_id_of(raw)
            log.warning("declining malformed offer %s: %s", offer_id or "?", error)
            self.counts["received"] += 1
            if offer_id:
                self.decline([offer_id], self.options.refuse_seconds)
                if offer_id in self.undeclined:  # still outstanding: try again later
                    self.bad_undeclined.add(offer_id)
            return None
        self.held[offer.offer_id] = offer
        self.counts["received"] += 1
        key = self.key(offer)
        known = self.agents.get(key)
        if known is None or not known.hostname:
            attrs = {**offer.attributes, **self.options.role_attributes(key)}
            self.agents[key] = AgentInfo(key, offer.hostname, {}, attrs)
        self.report_capacity(key)
        return offer

    def decline(self, offer_ids: list[str], refuse_seconds: float) -> None:
        """Decline; a DECLINE that fails leaves the offers outstanding at the master, so
        they are kept (and used or declined again at the next run) until rescinded."""
        ids = [{"value": i} for i in offer_ids]
        if self._call("declineOffer", ids, {"refuse_seconds": refuse_seconds}):
            self.undeclined.difference_update(offer_ids)
        else:
            self.undeclined.update(offer_ids)

    def decline_malformed_again(self) -> None:
        if self.bad_undeclined:
            self.decline(sorted(self.bad_undeclined), self.options.refuse_seconds)
            self.bad_undeclined &= self.undeclined  # those whose DECLINE failed again

    def take_by_agent(self) -> dict[str, list[Offer]]:
        """Every held offer, grouped by engine agent, and no longer held (an allocation
        run's end uses or declines each; `keep_outstanding` takes back those still out)."""
        by_agent: dict[str, list[Offer]] = {}
        for offer in self.held.values():
            by_agent.setdefault(self.key(offer), []).append(offer)
        self.held = {}
        return by_agent

    def keep_outstanding(self, offers: list[Offer]) -> None:
        for offer in offers:
            if offer.offer_id in self.undeclined:
                self.held[offer.offer_id] = offer

    def rescind(self, offer_id: str) -> None:
        offer = self.held.pop(offer_id, None)
        self.undeclined.discard(offer_id)
        self.bad_undeclined.discard(offer_id)
        if offer is not None:
            self.counts["rescinded"] += 1
            self.report_capacity(self.key(offer))

    def forget_offers(self) -> None:
        """A new subscription: the master discarded every offer (without a rescind)."""
        self.held.clear()
        for key in list(self.agents):
            self.report_capacity(key)

    def remove_agent(self, agent_id: str) -> list[str]:
        """The master removed a Mesos agent: its offers and engine agents are gone (returned,
        for the broker's `agent_removed`)."""
        keys = [k for k in self.agents if self.options.agent_id(k) == agent_id]
        self.held = {i: o for i, o in self.held.items() if o.agent_id != agent_id}
        for key in keys:
            del self.agents[key]
            self.announced.discard(key)
        return keys

    def capacity(self, key: str) -> dict[str, float]:
        """What the broker may use on an engine agent: its held offers plus its tasks."""
        with self._lock:
            total = self.room(key)
            for resources in self._tasks_on(key):
                for r, v in resources.items():
                    total[r] = total.get(r, 0.0) + v
            return total

    def report_capacity(self, key: str) -> None:
        """Queue a capacity report for an engine agent; sent once the backend's lock is
        released (the broker's lock comes first). Reports from pymesos's thread and the
        allocation thread can reach the broker in either order, and an allocation run may
        use or decline an agent's offers between its first report being queued and applied,
        so no report carries a snapshot, not even the first (`agent_added`): the broker
        reads the capacity when it applies a report, under its own lock. Whatever the order,
        the last report applied after the last change reads what the book holds then."""
        info = self.agents.get(key)
        if info is None or self.events is None:
            return
        total = self.capacity(key)
        if any(self.key(offer) == key for offer in self.held.values()):
            self.last_offered[key] = dict(total)
        events = self.events
        capacity = LiveCapacity(functools.partial(self.capacity, key))
        if key not in self.announced:
            if not any(v > 0 for v in total.values()):
                return
            self.announced.add(key)
            live = AgentInfo(key, info.hostname, capacity, info.attributes)  # type: ignore[arg-type]
            self.outbox.append(functools.partial(events.agent_added, live))
            return
        self.outbox.append(functools.partial(events.capacity_changed, key, capacity))

    def room(self, key: str) -> dict[str, float]:
        """The resources of the offers held for an engine agent (what one ACCEPT of them
        may launch in all)."""
        total: dict[str, float] = {}
        for offer in self.held.values():
            if self.key(offer) == key:
                for r, v in offer.resources.items():
                    total[r] = total.get(r, 0.0) + v
        return total

    def take_reports(self) -> list[Callable[[], None]]:
        outbox, self.outbox = self.outbox, []
        return outbox

    def stats(self) -> dict[str, int]:
        return {"held": len(self.held), **self.counts}


class LiveCapacity(Mapping[str, float]):
    """An agent's capacity, read from the book when the broker applies the report."""

    def __init__(self, read: Callable[[], dict[str, float]]) -> None:
        self._read = read

    def __getitem__(self, name: str) -> float:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def items(self) -> ItemsView[str, float]:
        return self._read().items()
