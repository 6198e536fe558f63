"""The start barrier of a live compare run (allocator.batch.gate) and the broker's hold on
grants under it: nothing is granted until the first wave's drivers have registered."""

from __future__ import annotations

from support.broker import PI, WORDCOUNT, RecordingBackend, request
from support.polling import wait_for

from allocator.batch.gate import StartGate
from allocator.broker.core import Broker
from allocator.engine_config import EngineConfig


class RecordingBroker:
    def __init__(self) -> None:
        self.tenants: dict[str, object] = {}
        self.held: list[bool] = []

    def hold_grants(self, held: bool) -> None:
        self.held.append(held)


def test_gate_opens_when_the_first_wave_has_registered():
    broker = RecordingBroker()
    gate = StartGate(broker, expected=2, timeout=600)
    gate.close()
    try:
        assert broker.held == [True]
        broker.tenants["app-1"] = object()
        assert gate.opened_after is None and broker.held == [True]
        broker.tenants["app-2"] = object()
        wait_for(lambda: gate.opened_after is not None, 10, "the gate to open")
        assert broker.held == [True, False]
    finally:
        gate.stop()


def test_gate_opens_at_its_timeout_without_every_driver():
    broker = RecordingBroker()
    gate = StartGate(broker, expected=3, timeout=0.3)
    gate.close()
    try:
        wait_for(lambda: gate.opened_after is not None, 10, "the gate to open")
        assert gate.opened_after >= 0.3
        assert broker.held == [True, False]
    finally:
        gate.stop()


def test_stopped_gate_stays_closed():
    broker = RecordingBroker()
    gate = StartGate(broker, expected=1, timeout=600)
    gate.close()
    gate.stop()
    broker.tenants["late"] = object()
    assert broker.held == [True] and gate.opened_after is None


def test_held_broker_registers_tenants_but_grants_nothing_until_released():
    broker = Broker(RecordingBackend(), EngineConfig("rpsdsf", mode="characterized"))
    broker.start(loop=False)
    try:
        broker.hold_grants(True)
        broker.register(request("pi", PI, target=4))
        broker.register(request("wc", WORDCOUNT, target=4))
        assert set(broker.tenants) == {"pi", "wc"}
        assert broker.allocate_once() == 0 and broker.backend.launched == []
        broker.hold_grants(False)
        assert broker.allocate_once() == 8  # both targets fit paper 002's six agents
        assert {s.tenant_id for s in broker.backend.launched} == {"pi", "wc"}
    finally:
        broker.stop()
