"""deploy/systemd/fairbroker.service: the settings operators rely on, and `systemd-analyze
verify` where systemd is installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from allocator.cli.serve_config import load_serve_config

REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "deploy" / "systemd" / "fairbroker.service"


def unit_settings(text: str) -> dict[str, dict[str, list[str]]]:
    """Section -> key -> values (systemd allows a key several times)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            out[section] = {}
            continue
        key, _, value = line.partition("=")
        out[section].setdefault(key, []).append(value)
    return out


def test_the_unit_runs_serve_as_a_dedicated_user_with_failover_and_hardening() -> None:
    service = unit_settings(UNIT.read_text())["Service"]
    one = {key: values[-1] for key, values in service.items()}
    assert one["User"] == "fairbroker" and one["Group"] == "fairbroker"
    assert one["ExecStart"].endswith("/bin/fairbroker serve")
    assert one["KillSignal"] == "SIGTERM"  # the broker's failover stop
    assert one["Restart"] == "on-failure"
    assert one["RestartPreventExitStatus"] == "2"  # a bad configuration is not retried
    assert one["StateDirectory"] == "fairbroker"
    for key, value in {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "PrivateDevices": "yes", "RestrictSUIDSGID": "yes",
        "CapabilityBoundingSet": "",
    }.items():  # fmt: skip
        assert one[key] == value, key
    # the executor sandbox (bubblewrap) needs these namespaces and mount(2), nothing more
    assert one["RestrictNamespaces"].split() == ["user", "mnt", "pid", "ipc", "uts"]
    assert one["SystemCallFilter"].split() == ["@system-service", "@mount"]
    env = dict(v.split("=", 1) for v in service["Environment"])
    assert env == {
        "FAIRBROKER_CONFIG": "/etc/fairbroker/fairbroker.yaml",
        "FAIRBROKER_STATE_DIR": "/var/lib/fairbroker",  # = StateDirectory
    }
    # the example configuration, read the way the unit hands it over, is valid
    config, sources = load_serve_config({}, REPO / "deploy" / "fairbroker.yaml", env)
    assert config.state_dir == Path("/var/lib/fairbroker")
    assert sources["state_dir"] == "FAIRBROKER_STATE_DIR"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart exists: point it at this checkout's entry point
    fairbroker = Path(sys.executable).with_name("fairbroker")
    text = UNIT.read_text().replace("/opt/fairbroker/bin/fairbroker", str(fairbroker))
    unit = tmp_path / "fairbroker.service"
    unit.write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
