"""/healthz reports the allocation loop: 503 with the reason once its thread has died or it
has completed no run for much longer than its interval (it said ok while `--interval 1e10`
had killed the thread). A real HTTP server on loopback; the loop's failures are injected."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.broker import AGENTS, RecordingBackend

from allocator.broker import loop
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig, EngineConfigError


def healthz(service: BrokerService) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{service.http_address}/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def until_unhealthy(service: BrokerService, seconds: float = 30.0) -> dict:
    deadline = time.monotonic() + seconds
    while (answer := healthz(service))[0] == 200:
        assert time.monotonic() < deadline, "/healthz kept answering 200"
        time.sleep(0.05)
    status, body = answer
    assert status == 503 and body["ok"] is False, answer
    return body


def service_with(engine: EngineConfig, tmp_path: Path) -> BrokerService:
    options = BrokerOptions(engine=engine, http_port=0, grpc_port=0, state_dir=tmp_path,
                            agents=AGENTS)  # fmt: skip
    return BrokerService(options, backend=RecordingBackend())


def test_a_loop_thread_killed_by_its_timer_is_reported(tmp_path: Path) -> None:
    """The original failure, let past the validation that now refuses it: a wait of 1e10 s
    overflows threading's timer and ends the loop thread."""
    with pytest.raises(EngineConfigError, match="interval"):
        EngineConfig("drf", interval=1e10)
    engine = EngineConfig("drf", interval=0.05)
    object.__setattr__(engine, "interval", 1e10)  # as EngineConfig accepted it before
    with service_with(engine, tmp_path) as service:
        body = until_unhealthy(service)
        assert body["reason"].startswith("the allocation loop stopped: OverflowError"), body
        assert body["allocation_loop"] == body["reason"]


def test_a_loop_whose_runs_fail_is_reported_once_it_is_overdue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Healthy while runs complete; a run that raises every time keeps the thread alive but
    completes nothing: 503 once no run has completed for 2 intervals + the grace."""
    with service_with(EngineConfig("drf", interval=0.05), tmp_path) as service:
        broker = service.broker
        completed = threading.Event()
        real_run = broker.allocate_once

        def watched_run() -> int:
            launched = real_run()
            completed.set()
            return launched

        monkeypatch.setattr(broker, "allocate_once", watched_run)
        assert completed.wait(30), "no run completed"
        assert healthz(service) == (200, {"ok": True})

        def failing_run() -> int:
            raise RuntimeError("injected")

        monkeypatch.setattr(loop, "STALL_GRACE_SECONDS", 0.5)
        monkeypatch.setattr(broker, "allocate_once", failing_run)
        body = until_unhealthy(service)
        assert body["reason"].startswith("the allocation loop has completed no run for "), body
        assert body["reason"].endswith(" s (interval 0.05 s)"), body
