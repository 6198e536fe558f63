"""The start barrier of a live compare run (allocator.batch.gate): agents offered with no
resources until the first wave's drivers have registered, then with all of them."""

from __future__ import annotations

from support.polling import wait_for

from allocator.backends.base import AgentInfo
from allocator.batch.gate import StartGate

AGENTS = [
    AgentInfo("t1-a", "127.0.1.1", {"cpus": 4, "mem": 7168}, {"type": "t1"}),
    AgentInfo("t2-a", "127.0.1.2", {"cpus": 8, "mem": 4096}, {"type": "t2"}),
]


class RecordingBroker:
    """What the gate uses of allocator.broker.core.Broker: agent_added and tenants."""

    def __init__(self) -> None:
        self.tenants: dict[str, object] = {}
        self.offered: dict[str, dict[str, float]] = {a.name: dict(a.resources) for a in AGENTS}
        self.attributes: dict[str, dict[str, str]] = {}

    def agent_added(self, agent: AgentInfo) -> None:
        self.offered[agent.name] = dict(agent.resources)
        self.attributes[agent.name] = dict(agent.attributes)


def test_gate_opens_when_the_first_wave_has_registered():
    broker = RecordingBroker()
    gate = StartGate(broker, AGENTS, expected=2, timeout=600)
    gate.close()
    try:
        assert broker.offered == {"t1-a": {}, "t2-a": {}}
        assert broker.attributes["t2-a"] == {"type": "t2"}  # kept while closed
        broker.tenants["app-1"] = object()
        assert gate.opened_after is None and broker.offered["t1-a"] == {}
        broker.tenants["app-2"] = object()
        wait_for(lambda: gate.opened_after is not None, 10, "the gate to open")
        assert broker.offered == {a.name: a.resources for a in AGENTS}
    finally:
        gate.stop()


def test_gate_opens_at_its_timeout_without_every_driver():
    broker = RecordingBroker()
    gate = StartGate(broker, AGENTS, expected=3, timeout=0.3)
    gate.close()
    try:
        wait_for(lambda: gate.opened_after is not None, 10, "the gate to open")
        assert gate.opened_after >= 0.3
        assert broker.offered["t2-a"] == {"cpus": 8, "mem": 4096}
    finally:
        gate.stop()
