"""The book of offers on its own (`allocator/backends/mesos/offers.py`), with plain offers, a
recorded call to the master and recorded reports: what is held under which engine agent,
what is declined (and kept when the DECLINE fails), what each agent's capacity is, and which
reports reach the broker."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping

import pytest
from support.mesos import offer

from allocator.backends.base import AgentInfo
from allocator.backends.mesos.offers import OfferBook, parse_offer, scalars
from allocator.backends.mesos.options import MesosOptions


class Master:
    """The master as the book sees it: each call recorded, answered by `answer`."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.answer = True

    def __call__(self, name: str, *args: object) -> bool:
        self.calls.append((name, args))
        return self.answer

    def declined(self) -> list[tuple[list[str], float]]:
        return [([i["value"] for i in ids], filters["refuse_seconds"])
                for name, (ids, filters) in self.calls if name == "declineOffer"]  # fmt: skip


class Events:
    """The broker's side of the reports, applied as the broker would."""

    def __init__(self) -> None:
        self.added: list[AgentInfo] = []
        self.changed: list[tuple[str, Mapping[str, float]]] = []

    def agent_added(self, agent: AgentInfo) -> None:
        self.added.append(agent)

    def capacity_changed(self, name: str, capacity: Mapping[str, float]) -> None:
        self.changed.append((name, capacity))

    def status(self, status: object) -> None:  # (not the book's)
        raise AssertionError(status)

    def agent_removed(self, name: str) -> None:  # (not the book's)
        raise AssertionError(name)


def book(roles: tuple[str, ...] = ("*",), tasks: dict[str, list[dict]] | None = None):
    master, events = Master(), Events()
    on = tasks or {}
    offers = OfferBook(MesosOptions(master="m:5050", roles=roles, refuse_seconds=7.0), master,
                       lambda key: on.get(key, []), threading.RLock())  # fmt: skip
    offers.events = events
    return offers, master, events


def deliver(offers: OfferBook) -> None:
    for report in offers.take_reports():
        report()


def test_a_first_offer_makes_an_agent_with_the_offers_total_and_its_attributes() -> None:
    offers, master, events = book()
    held = offers.receive(offer("o1", "S1", "h1", 8, 4096))
    assert held is not None and held.agent_id == "S1"
    assert events.added == []  # queued, not sent under the backend's lock
    deliver(offers)
    assert events.added == [AgentInfo("S1", "h1", {"cpus": 8.0, "mem": 4096.0}, {"type": "S1"})]
    assert offers.stats() == {"held": 1, "received": 1, "accepted": 0, "declined": 0,
                              "rescinded": 0}  # fmt: skip
    assert master.calls == []


def test_a_first_report_is_read_when_applied_too() -> None:
    """Issue 23: the first report of an agent used to carry a snapshot of its first offer;
    an allocation run that declines the offer before the report is applied leaves the
    report reading nothing, and a later offer of the agent is a capacity change."""
    offers, _, events = book()
    offers.receive(offer("o1", "S1", "h1", 8, 4096))
    offers.take_by_agent()  # the run declined it before the report reached the broker
    deliver(offers)
    (agent,) = events.added
    assert agent.name == "S1" and dict(agent.resources) == {}
    offers.receive(offer("o2", "S1", "h1", 2, 1024))
    deliver(offers)
    assert len(events.added) == 1 and [n for n, _ in events.changed] == ["S1"]
    assert dict(agent.resources) == {"cpus": 2.0, "mem": 1024.0}


def test_a_second_offer_of_a_known_agent_is_a_capacity_change_read_when_applied() -> None:
    offers, _, events = book()
    offers.receive(offer("o1", "S1", "h1", 8, 4096))
    deliver(offers)
    offers.receive(offer("o2", "S1", "h1", 2, 1024))
    deliver(offers)
    ((name, capacity),) = events.changed
    assert name == "S1" and dict(capacity) == {"cpus": 10.0, "mem": 5120.0}
    offers.take_by_agent()  # the offers are used or declined: the report reads what is left
    assert dict(capacity) == {} and len(capacity) == 0


def test_capacity_is_the_held_offers_plus_the_brokers_tasks_there() -> None:
    tasks = {"S1": [{"cpus": 2.0, "mem": 1024.0}, {"cpus": 1.5, "mem": 512.0}]}
    offers, _, _ = book(tasks=tasks)
    offers.receive(offer("o1", "S1", "h1", 4, 2048))
    offers.receive(offer("o2", "S2", "h2", 8, 4096))
    assert offers.capacity("S1") == {"cpus": 7.5, "mem": 3584.0}  # 4 + 2 + 1.5, 2048 + 1536
    assert offers.capacity("S2") == {"cpus": 8.0, "mem": 4096.0}
    assert offers.capacity("S3") == {}


def test_several_roles_make_one_engine_agent_per_role_with_only_that_roles_resources() -> None:
    offers, _, events = book(roles=("pi", "wc"))
    raw = offer("o1", "S0@10.0.0.1:5051", "h1", 8, 4096, role="wc")
    raw["resources"].append({"name": "cpus", "type": "SCALAR", "scalar": {"value": 3},
                             "allocation_info": {"role": "pi"}})  # fmt: skip
    offers.receive(raw)
    deliver(offers)
    (agent,) = events.added
    assert agent.name == "S0@10.0.0.1:5051@wc"
    assert agent.resources == {"cpus": 8.0, "mem": 4096.0}  # pi's 3 cpus are not wc's
    assert agent.attributes == {"type": "S0@10.0.0.1:5051", "mesos_role": "wc"}
    assert offers.remove_agent("S0@10.0.0.1:5051") == ["S0@10.0.0.1:5051@wc"]
    assert offers.stats()["held"] == 0 and offers.agents == {}


@pytest.mark.parametrize(
    "spoil",
    [
        lambda raw: raw.pop("hostname"),
        lambda raw: raw["resources"][0]["scalar"].update(value=-1),
        lambda raw: raw["resources"][1]["scalar"].update(value=math.nan),
        lambda raw: raw.pop("agent_id"),
    ],
    ids=["no hostname", "negative cpus", "NaN mem", "no agent id"],
)
def test_a_malformed_offer_is_declined_and_never_held(spoil) -> None:
    offers, master, _ = book()
    raw = offer("bad", "S1", "h1", 8, 4096)
    spoil(raw)
    assert offers.receive(raw) is None
    assert master.declined() == [(["bad"], 7.0)]
    assert offers.stats()["held"] == 0 and offers.stats()["received"] == 1
    assert offers.agents == {} and offers.take_reports() == []


def test_a_malformed_offer_whose_decline_failed_is_declined_again_until_it_goes() -> None:
    offers, master, _ = book()
    master.answer = False  # the DECLINE fails: the offer stays outstanding at the master
    offers.receive({**offer("bad", "S1", "h1", 8, 4096), "hostname": ""})
    assert offers.bad_undeclined == {"bad"}
    offers.decline_malformed_again()  # fails again: still there
    assert offers.bad_undeclined == {"bad"}
    master.answer = True
    offers.decline_malformed_again()
    assert offers.bad_undeclined == set() and offers.undeclined == set()
    offers.decline_malformed_again()  # nothing left: no call
    assert master.declined() == [(["bad"], 7.0)] * 3


def test_offers_whose_decline_failed_are_kept_and_a_rescind_drops_them() -> None:
    offers, master, _ = book()
    offers.receive(offer("o1", "S1", "h1", 8, 4096))
    offers.receive(offer("o2", "S1", "h1", 1, 512))
    offers.receive(offer("o3", "S2", "h2", 4, 2048))
    taken = offers.take_by_agent()
    assert {key: [o.offer_id for o in group] for key, group in taken.items()} == {
        "S1": ["o1", "o2"], "S2": ["o3"]
    }  # fmt: skip
    assert offers.stats()["held"] == 0
    master.answer = False
    offers.decline(["o1", "o2"], 7.0)
    master.answer = True
    offers.decline(["o3"], 7.0)
    for group in taken.values():
        offers.keep_outstanding(group)
    assert sorted(offers.held) == ["o1", "o2"]  # outstanding at the master: still usable
    offers.rescind("o1")
    offers.rescind("o-unknown")
    assert sorted(offers.held) == ["o2"] and offers.undeclined == {"o2"}
    assert offers.counts["rescinded"] == 1


def test_an_agent_with_nothing_usable_is_not_added_and_last_offered_follows_held_offers() -> None:
    offers, _, events = book()
    offers.receive(offer("o1", "S1", "h1", 0, 0))
    deliver(offers)
    assert events.added == [] and "S1" in offers.agents  # known, but nothing to use yet
    assert offers.last_offered == {"S1": {"cpus": 0.0, "mem": 0.0}}
    offers.receive(offer("o2", "S1", "h1", 2, 256))
    deliver(offers)
    assert [a.resources for a in events.added] == [{"cpus": 2.0, "mem": 256.0}]
    assert offers.last_offered["S1"] == {"cpus": 2.0, "mem": 256.0}
    offers.take_by_agent()
    offers.report_capacity("S1")  # no offer held: the last offered total is kept
    assert offers.last_offered["S1"] == {"cpus": 2.0, "mem": 256.0}


def test_a_new_subscription_forgets_every_offer_and_reports_every_agent() -> None:
    offers, _, events = book()
    offers.receive(offer("o1", "S1", "h1", 8, 4096))
    offers.receive(offer("o2", "S2", "h2", 4, 2048))
    deliver(offers)
    offers.forget_offers()
    deliver(offers)
    assert offers.stats()["held"] == 0
    assert [(name, dict(cap)) for name, cap in events.changed] == [("S1", {}), ("S2", {})]


def test_scalars_and_parse_offer_read_the_v1_resource_list() -> None:
    resources = offer("o1", "S1", "h1", 2.5, 100, role="pi")["resources"]
    assert scalars(resources) == {"cpus": 2.5, "mem": 100.0}  # ports (RANGES) ignored
    assert scalars(resources, "wc") == {}
    parsed = parse_offer(offer("o1", "S1", "h1", 2.5, 100, role="pi"), "*")
    assert (parsed.offer_id, parsed.role, parsed.hostname) == ("o1", "pi", "h1")
    without_role = {**offer("o1", "S1", "h1", 1, 1), "allocation_info": {}}
    assert parse_offer(without_role, "first").role == "first"
