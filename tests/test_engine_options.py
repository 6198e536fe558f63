"""Every command that runs the engine takes the same options, and they reach the engine."""

from __future__ import annotations

import json

import pytest
import yaml
from support.commands import run_fairbroker
from support.instances import two_roles

from allocator.engine_config import EngineConfig, EngineConfigError

FLAGS = ["--level", "framework", "--trigger", "release", "--seed", "3", "--interval", "0.5",
         "--refuse-seconds", "2", "--ties", "waste", "--selection", "joint"]  # fmt: skip


def test_sim_passes_every_option_to_the_engine(tmp_path):
    scenario = tmp_path / "b.yaml"
    scenario.write_text(yaml.safe_dump(two_roles({"pi": 1, "wc": 1}, executors=4)))
    out = run_fairbroker("sim", str(scenario), "-s", "psdsf", *FLAGS, "--role-weight", "pi=2",
                         "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    assert run["engine"] == {
        "scheduler": "psdsf", "mode": "characterized", "selection": "joint",
        "level": "framework", "trigger": "release", "ties": "waste", "seed": 3,
        "refuse_seconds": 2.0, "interval": 0.5, "role_weights": {"pi": 2.0, "wc": 1.0},
    }  # fmt: skip


def test_serve_takes_the_same_options():
    out = run_fairbroker("serve", "-s", "drf", *FLAGS, "--role-weight", "pi=2", "--print-config")
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    assert (config["level"], config["trigger"], config["seed"], config["interval"]) == (
        "framework", "release", 3, 0.5)  # fmt: skip
    assert config["refuse_seconds"] == 2 and config["role_weights"] == {"pi": 2.0}


@pytest.mark.parametrize("command", ["fill", "sim", "whatif", "batch", "serve", "configure"])
def test_every_engine_command_lists_the_options(command):
    out = run_fairbroker(command, "--help")
    expected = {"--scheduler", "--mode", "--selection", "--ties"}
    if command != "fill":  # a static fill has no clock and no groups
        expected |= {"--level", "--trigger", "--role-weight"}
    if command not in ("fill", "configure"):
        expected |= {"--interval", "--refuse-seconds"}
    if command in ("whatif", "configure"):
        expected -= {"--scheduler", "--mode"} if command == "whatif" else set()
    missing = {flag for flag in expected if flag not in out.stdout}
    assert not missing, missing


def test_trace_only_and_batch_only_options_are_errors(tmp_path):
    scenario = tmp_path / "b.yaml"
    scenario.write_text(yaml.safe_dump(two_roles({"pi": 1, "wc": 1}, executors=4)))
    out = run_fairbroker("sim", str(scenario), "--horizon", "100")
    assert out.returncode == 2 and "--horizon: only for trace scenarios" in out.stderr


@pytest.mark.parametrize(
    ("changes", "field"),
    [({"seed": -1}, "seed"), ({"interval": 0}, "interval"), ({"interval": 3600.5}, "interval"),
     ({"interval": 1e10}, "interval"), ({"refuse_seconds": float("nan")},
     "refuse_seconds"), ({"role_weights": {"a": 0}}, "role_weights"), ({"level": "x"}, "level"),
     ({"scheduler": "rpsdfs"}, "scheduler")],
)  # fmt: skip
def test_bad_configuration_names_the_field(changes, field):
    base = {"scheduler": "drf", **changes}
    with pytest.raises((EngineConfigError, Exception), match=field):
        EngineConfig(**base)


def test_an_interval_of_up_to_an_hour_is_accepted():
    assert EngineConfig("drf", interval=3600).interval == 3600.0
    assert EngineConfig("drf", interval=1e-3).interval == 1e-3


def test_named_constructors():
    assert EngineConfig.mesos() == EngineConfig("drf")
    flat = EngineConfig.flat("bfdrf")
    assert (str(flat.level), str(flat.trigger), str(flat.effective_selection)) == (
        "framework", "release", "bestfit")  # fmt: skip
