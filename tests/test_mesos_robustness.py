"""The Mesos backend with hostile or broken input from the master and the disk: a malformed
offer among good ones, a DECLINE that fails, agent ids with '@', an unreadable framework-id
file, and secrets and request bodies kept out of logs and reprs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.mesos import RecordingDriver, launched, offer, tenant

from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.broker.core import Broker
from allocator.engine_config import EngineConfig
from allocator.errors import FairbrokerError


class FailingDriver(RecordingDriver):
    """Records calls; the calls named in `failing` raise as pymesos does on an error answer
    (its message carries the request body after the first line)."""

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()

    def __getattr__(self, name: str):
        record = super().__getattr__(name)

        def call(*args, **kwargs):
            record(*args, **kwargs)
            if name in self.failing:
                raise RuntimeError(
                    'Failed to send request 503: b"busy"\n{"environment": "SECRET_BODY"}'
                )

        return call


def make(tmp_path: Path, roles=("*",), driver=None):
    driver = driver or FailingDriver()
    backend = MesosBackend(
        MesosOptions(master="127.0.0.1:5050", state_dir=tmp_path, roles=roles),
        driver_factory=lambda *_: driver,
    )
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    backend.registered(driver, {"value": "fw-1"}, {})
    return broker, backend, driver


@pytest.mark.parametrize(
    "spoil",
    [
        lambda o: o["resources"][0]["scalar"].update(value=float("nan")),
        lambda o: o["resources"][1]["scalar"].update(value=-4096),
        lambda o: o.pop("hostname"),
        lambda o: o["resources"][0].update(scalar={"value": "lots"}),
    ],
)
def test_a_malformed_offer_is_declined_and_the_good_ones_are_used(tmp_path, spoil) -> None:
    broker, backend, driver = make(tmp_path)
    bad = offer("bad", "a1", "h1", 8, 4096)
    spoil(bad)
    backend.resourceOffers(driver, [bad, offer("good", "a2", "h2", 8, 4096)])
    broker.register(tenant("pi", 2, 1024, target=2))
    assert broker.allocate_once() == 2
    assert {t["agent_id"]["value"] for t in launched(driver)} == {"a2"}
    declined = [ids for ids, _ in driver.named("declineOffer")]
    assert [{"value": "bad"}] in declined
    # the agent of the bad offer is not ignored from then on: its next good offer is used
    backend.resourceOffers(driver, [offer("good2", "a1", "h1", 8, 4096)])
    broker.set_target("pi", 4)
    assert broker.allocate_once() == 2
    broker.stop(kill_executors=False)


def test_an_offer_whose_decline_failed_is_kept_and_used(tmp_path) -> None:
    broker, backend, driver = make(tmp_path)
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    driver.failing.add("declineOffer")
    broker.allocate_once()  # nothing wanted: o1 is declined, and the DECLINE fails
    assert backend.offer_stats()["held"] == 1  # still outstanding at the master: kept
    driver.failing.clear()
    broker.register(tenant("pi", 2, 1024, target=1))
    assert broker.allocate_once() == 1  # the executor goes into the kept offer
    ((ids, _, _),) = driver.named("acceptOffers")
    assert ids == [{"value": "o1"}]
    broker.stop(kill_executors=False)


def test_a_kept_offer_goes_once_rescinded(tmp_path) -> None:
    broker, backend, driver = make(tmp_path)
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    driver.failing.add("declineOffer")
    broker.allocate_once()
    backend.offerRescinded(driver, {"value": "o1"})
    assert backend.offer_stats()["held"] == 0
    broker.stop(kill_executors=False)


def test_a_malformed_offer_whose_decline_failed_is_declined_again(tmp_path) -> None:
    broker, backend, driver = make(tmp_path)
    bad = offer("bad", "a1", "h1", 8, 4096)
    bad["resources"][0]["scalar"]["value"] = float("nan")
    driver.failing.add("declineOffer")
    backend.resourceOffers(driver, [bad])
    broker.allocate_once()  # the DECLINE fails again: still outstanding at the master
    driver.failing.clear()
    broker.allocate_once()
    declined = [ids for ids, _ in driver.named("declineOffer")]
    assert declined.count([{"value": "bad"}]) == 3  # at the offer, and at each run
    broker.allocate_once()  # declined at last: not again
    assert [ids for ids, _ in driver.named("declineOffer")].count([{"value": "bad"}]) == 3
    broker.stop(kill_executors=False)


def test_a_rescinded_malformed_offer_is_not_declined_again(tmp_path) -> None:
    broker, backend, driver = make(tmp_path)
    bad = offer("bad", "a1", "h1", 8, 4096)
    bad.pop("hostname")
    driver.failing.add("declineOffer")
    backend.resourceOffers(driver, [bad])
    backend.offerRescinded(driver, {"value": "bad"})
    driver.failing.clear()
    broker.allocate_once()
    assert [ids for ids, _ in driver.named("declineOffer")] == [[{"value": "bad"}]]
    broker.stop(kill_executors=False)


@pytest.mark.parametrize("roles", [("*",), ("pi", "wc")])
def test_agent_ids_with_at_signs(tmp_path, roles) -> None:
    broker, backend, driver = make(tmp_path, roles)
    agent = "S0@10.0.0.1:5051"
    role = roles[0] if roles != ("*",) else "*"
    backend.resourceOffers(driver, [offer("o1", agent, "h1", 8, 4096, role=role)])
    broker.register(tenant("pi", 2, 1024, target=2, group=roles[0] if role != "*" else ""))
    assert broker.allocate_once() == 2
    assert {t["agent_id"]["value"] for t in launched(driver)} == {agent}
    backend.slaveLost(driver, {"value": agent})
    assert broker.engine.agents == {}  # the agent and its executors are gone
    broker.stop(kill_executors=False)


def test_an_unreadable_framework_id_file_is_an_error(tmp_path) -> None:
    (tmp_path / "mesos-framework-id").write_bytes(b"\xff\xfe garbage\n")
    with pytest.raises(FairbrokerError, match="mesos-framework-id"):
        MesosBackend(MesosOptions(master="m:5050", state_dir=tmp_path))
    (tmp_path / "mesos-framework-id").unlink()
    (tmp_path / "mesos-framework-id").mkdir()  # exists, cannot be read as a file
    with pytest.raises(FairbrokerError, match="cannot read"):
        MesosBackend(MesosOptions(master="m:5050", state_dir=tmp_path))


def test_secrets_and_bodies_stay_out_of_reprs_and_logs(tmp_path, caplog) -> None:
    options = MesosOptions(master="m:5050", principal="fb", secret="hunter2", state_dir=tmp_path)
    assert "hunter2" not in repr(options)
    caplog.set_level(logging.DEBUG)
    broker, backend, driver = make(tmp_path)
    driver.failing.add("acceptOffers")
    backend.resourceOffers(driver, [offer("o1", "a1", "h1", 8, 4096)])
    broker.register(tenant("pi", 2, 1024, target=1))
    broker.allocate_once()
    assert "Mesos call acceptOffers failed: Failed to send request 503" in caplog.text
    assert "SECRET_BODY" not in caplog.text
    broker.stop(kill_executors=False)


class _Answer:
    """What `requests.get` returns for the master's /master/slaves (a stub)."""

    def __init__(self, body: dict) -> None:
        self.body = body

    def raise_for_status(self) -> None:
        pass

    def json(self) -> dict:
        return self.body


@pytest.mark.parametrize("roles", [("*",), ("pi", "wc")])
def test_an_adopted_executor_on_an_at_sign_agent_is_found_in_the_agent_list(
    tmp_path, roles, monkeypatch
) -> None:
    """After a restart the adopted executors' agents are read from /master/slaves (before
    any offer): an agent id with '@' is found, and its role is the key's last part."""
    from allocator.backends.mesos import link
    from allocator.broker.store import Store

    agent, host = "S0@10.0.0.1:5051", "h1"
    role = roles[0] if len(roles) > 1 else "*"
    group = roles[0] if len(roles) > 1 else ""

    def start(driver: FailingDriver):
        backend = MesosBackend(
            MesosOptions(master="127.0.0.1:5050", state_dir=tmp_path, roles=roles),
            driver_factory=lambda *_: driver,
        )
        broker = Broker(backend, EngineConfig("drf"), store=Store(tmp_path / "s.sqlite"))
        broker.start(loop=False)
        backend.registered(driver, {"value": "fw-1"}, {})
        return broker, backend

    first_driver = FailingDriver()
    first, backend = start(first_driver)
    backend.resourceOffers(first_driver, [offer("o1", agent, host, 8, 4096, role=role)])
    first.register(tenant("pi", 2, 1024, target=2, group=group))
    assert first.allocate_once() == 2
    first.stop(kill_executors=False)

    asked: list[str] = []

    def get(url: str, **_: object) -> _Answer:
        asked.append(url)
        other = {"id": "S1", "hostname": "h2", "attributes": {}}
        mine = {"id": agent, "hostname": host, "attributes": {"rack": "r1"}}
        return _Answer({"slaves": [other, mine]})

    monkeypatch.setattr(link.requests, "get", get)
    driver = FailingDriver()
    driver.master = "127.0.0.1:5050"
    second, backend = start(driver)
    assert second.engine.tasks_of("pi") == 2  # adopted
    key = agent if len(roles) == 1 else f"{agent}@{role}"
    backend._look_at_agents()
    assert asked and asked[-1] == "http://127.0.0.1:5050/master/slaves"
    found = backend.offers.agents[key]
    assert found.hostname == host
    expected = {"rack": "r1"} if len(roles) == 1 else {"rack": "r1", "mesos_role": role}
    assert dict(found.attributes) == expected
    second.stop(kill_executors=False)
