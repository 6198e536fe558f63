"""The link to the master on its own (`allocator/backends/mesos/link.py`), with a recording
driver and a fake clock: calls only while subscribed, SUPPRESS / REVIVE as the master has
them, heartbeats, reconnecting, the framework id file and the FrameworkInfo, health."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.mesos import RecordingDriver

from allocator.backends.mesos.link import FrameworkIdFile, Subscription
from allocator.backends.mesos.options import MesosOptions
from allocator.errors import FairbrokerError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def subscription(tmp_path: Path, **options: object):
    drivers: list[RecordingDriver] = []

    def factory(scheduler: object, framework: dict, opts: MesosOptions) -> RecordingDriver:
        drivers.append(RecordingDriver())
        drivers[-1].framework = framework
        return drivers[-1]

    clock = Clock()
    opts = MesosOptions(master="m:5050", state_dir=tmp_path, heartbeat_timeout=75.0,
                        agents_look_seconds=15.0, **options)  # fmt: skip
    return Subscription(opts, object(), factory, clock), drivers, clock


def test_nothing_is_sent_before_subscribed_and_each_call_after(tmp_path: Path) -> None:
    sub, drivers, _ = subscription(tmp_path)
    sub.connect()
    (driver,) = drivers
    assert driver.named("start") == [()]
    assert sub.call("declineOffer", [{"value": "o1"}], {}) is False
    assert driver.calls == [("start", ())]
    sub.subscribed_again()
    assert sub.call("declineOffer", [{"value": "o1"}], {}) is True
    assert driver.named("declineOffer") == [([{"value": "o1"}], {})]
    assert sub.lost() is True and sub.lost() is False  # said once per lost subscription
    assert sub.call("reviveOffers") is False


def test_a_failed_call_is_false_and_logs_only_its_first_line(tmp_path: Path, caplog) -> None:
    class Refusing(RecordingDriver):
        def acceptOffers(self, *args: object) -> None:
            raise RuntimeError("Failed to send request 503\nBODY with SECRET")

    sub = Subscription(MesosOptions(master="m:5050", state_dir=tmp_path), object(),
                       lambda *_: Refusing())  # fmt: skip
    sub.connect()
    sub.subscribed_again()
    with caplog.at_level(logging.ERROR, logger="allocator.backends.mesos"):
        assert sub.call("acceptOffers", [], [], {}) is False
    assert "Mesos call acceptOffers failed: Failed to send request 503" in caplog.text
    assert "SECRET" not in caplog.text


def test_suppress_once_revive_on_demand_and_again_after_each_subscription(
    tmp_path: Path,
) -> None:
    sub, drivers, _ = subscription(tmp_path)
    sub.connect()
    sub.subscribed_again()
    (driver,) = drivers
    for wants_more in (False, False, True, True, False):
        sub.want_offers(wants_more)
    assert [name for name, _ in driver.calls[1:]] == ["suppressOffers", "reviveOffers",
                                                      "suppressOffers"]  # fmt: skip
    sub.subscribed_again()  # the master reset the suppression
    sub.want_offers(False)
    assert [name for name, _ in driver.calls[1:]][-1] == "suppressOffers"
    assert len(driver.named("suppressOffers")) == 3


def test_a_suppress_not_sent_is_tried_again(tmp_path: Path) -> None:
    sub, drivers, _ = subscription(tmp_path)
    sub.connect()
    sub.want_offers(False)  # not subscribed: not sent, so not suppressed
    assert sub.suppressed is False
    sub.subscribed_again()
    sub.want_offers(False)
    assert sub.suppressed is True and drivers[0].named("suppressOffers") == [()]


def test_missed_heartbeats_are_counted_from_the_last_heartbeat_or_offer(tmp_path: Path) -> None:
    sub, _, clock = subscription(tmp_path)
    sub.connect()
    clock.now += 75.0
    assert not sub.heartbeats_missed()  # exactly the timeout: not yet
    clock.now += 0.5
    assert sub.heartbeats_missed()
    sub.heard(heartbeat=False)  # a status update is no heartbeat
    assert sub.heartbeats_missed()
    assert sub.link.state().last_event is not None
    sub.heard()
    assert not sub.heartbeats_missed()


def test_reconnecting_builds_a_new_driver_with_the_framework_id(tmp_path: Path) -> None:
    sub, drivers, clock = subscription(tmp_path)
    sub.connect()
    sub.registered("fw-7")
    sub.subscribed_again()
    clock.now += 80.0
    sub.reconnect()
    first, second = drivers
    assert first.named("stop") == [(True,)]  # failover: the tasks stay
    assert second.framework["id"] == {"value": "fw-7"}
    assert not sub.subscribed and not sub.link.state().connected
    assert not sub.heartbeats_missed()


def test_a_refused_id_is_dropped_only_once_the_master_lists_it_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pymesos subscribes again at once after each refusal: the same refusal is logged and
    the master asked about it at most every 10 s; only a framework the master lists among
    its completed ones (not among its live ones) has its id forgotten, and the next driver
    registers a new framework. (The real master's refusal: tests/test_mesos_real.py.)"""
    sub, drivers, clock = subscription(tmp_path)
    sub.connect()
    sub.registered("fw-7")
    asked: list[float] = []
    listed = {"frameworks": {"fw-7"}, "completed_frameworks": {"fw-7"}}

    def ids(master: object, timeout: float = 10) -> dict[str, set]:
        asked.append(clock.now)
        return listed

    monkeypatch.setattr(sub, "_framework_ids", ids)
    assert not sub.removed_for_good()  # no refusal: the master is not asked
    assert sub.refused("Framework has been removed") and asked == []
    assert not sub.refused("Framework has been removed")  # a repeat, not logged
    assert not sub.removed_for_good()  # still live at the master (a failover under way)
    clock.now += 9.0
    sub.refused("Framework has been removed")
    assert not sub.removed_for_good() and asked == [100.0]  # not asked again within 10 s
    listed = {"frameworks": set(), "completed_frameworks": {"fw-7"}}
    clock.now += 1.5
    assert sub.refused("Framework has been removed")  # logged again after 10 s
    assert sub.removed_for_good() and asked == [100.0, 110.5]
    assert sub.framework_id is None and FrameworkIdFile(tmp_path).load() is None
    sub.reconnect()
    assert "id" not in drivers[-1].framework


def test_a_reconnect_that_fails_waits_a_full_timeout_before_the_next(tmp_path: Path) -> None:
    def failing(*_: object) -> RecordingDriver:
        raise OSError("connection refused")

    clock = Clock()
    opts = MesosOptions(master="m:5050", state_dir=tmp_path, heartbeat_timeout=75.0)
    sub = Subscription(opts, object(), failing, clock)
    sub.driver = RecordingDriver()
    clock.now += 80.0
    sub.reconnect()
    assert not sub.heartbeats_missed()
    clock.now += 76.0
    assert sub.heartbeats_missed()


def test_the_master_agent_list_is_looked_at_when_due_and_only_while_subscribed(
    tmp_path: Path,
) -> None:
    sub, _, _ = subscription(tmp_path)
    sub.connect()
    assert not sub.look_due(0.0)
    sub.subscribed_again()
    assert sub.look_due(0.0)
    assert not sub.look_due(14.9)
    assert sub.look_due(15.0) and sub.next_look == 30.0
    sub.driver.master = None  # no leading master known: nothing asked
    assert sub.master_agents() is None


def test_health_is_unhealthy_while_subscribed_to_a_master_without_agents(tmp_path: Path) -> None:
    sub, _, _ = subscription(tmp_path)
    sub.connect()
    report = sub.health(unconfirmed=0)
    assert report["ok"] is False and "not subscribed" in str(report["reason"])
    sub.subscribed_again()
    assert sub.health(unconfirmed=0) == sub.link.health() | {"unreconciled_tasks": 0}
    report = sub.health(unconfirmed=3)  # (issue 23: no longer healthy at once)
    assert report["ok"] is False and str(report["reason"]).startswith("3 tasks unconfirmed")
    sub.has_agents = False
    report = sub.health(unconfirmed=0)
    assert report["ok"] is False
    assert report["reason"] == "subscribed, but the Mesos master has no agents"


def test_the_framework_info_declares_exactly_what_is_configured(tmp_path: Path) -> None:
    sub, _, _ = subscription(tmp_path, roles=("pi", "wc"), principal="broker", gpus=True,
                             user="spark", webui_url="http://h:8080")  # fmt: skip
    info = sub.framework_info()
    assert info == {
        "user": "spark", "name": "fairbroker", "failover_timeout": 7 * 24 * 3600.0,
        "checkpoint": True, "capabilities": [{"type": "MULTI_ROLE"}, {"type": "GPU_RESOURCES"}],
        "roles": ["pi", "wc"], "webui_url": "http://h:8080", "principal": "broker",
    }  # fmt: skip
    sub.registered("fw-1")
    assert sub.framework_info()["id"] == {"value": "fw-1"}
    again, _, _ = subscription(tmp_path)  # a restarted broker re-subscribes with the id
    assert again.framework_id == "fw-1"


def test_the_framework_id_file_refuses_what_is_not_an_id(tmp_path: Path) -> None:
    ids = FrameworkIdFile(tmp_path / "state")
    assert ids.load() is None
    ids.save("0b5e-4a1f-0000")
    assert ids.load() == "0b5e-4a1f-0000"
    ids.path.write_text("not an id\n")
    with pytest.raises(FairbrokerError, match="not a Mesos framework id"):
        ids.load()
    ids.path.write_bytes(b"\xff\xfe")
    with pytest.raises(FairbrokerError, match="cannot read the Mesos framework id"):
        ids.load()
    ids.forget()
    ids.forget()  # already gone: fine
    assert ids.load() is None


def test_stop_with_teardown_forgets_the_id_and_a_failover_keeps_it(tmp_path: Path) -> None:
    sub, drivers, _ = subscription(tmp_path)
    sub.connect()
    sub.registered("fw-2")
    sub.stop(kill_executors=False)
    assert drivers[0].named("stop") == [(True,)] and sub.id_file.load() == "fw-2"
    assert sub.stop(kill_executors=True) is False  # no master to confirm it: the id is kept
    assert drivers[0].named("stop")[-1] == (False,) and sub.id_file.load() == "fw-2"
