"""Every command that runs the engine takes the same options, and they reach the engine."""

from __future__ import annotations

import json

import pytest
import yaml
from support.commands import run_fairbroker
from support.instances import two_roles

from allocator.engine_config import EngineConfig, EngineConfigError

FLAGS = ["--level", "framework", "--trigger", "release", "--seed", "3", "--interval", "0.5",
         "--refuse-seconds", "2", "--ties", "waste", "--selection", "joint", "--fuga-k", "2",
         "--fuga-lambda", "0.5"]  # fmt: skip


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
    # FUGA's K and lambda (in FLAGS too) are recorded where they decide: with FUGA's selection.
    out = run_fairbroker("sim", str(scenario), "-s", "fuga", "--fuga-k", "2", "--fuga-lambda",
                         "0.5", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    engine = json.loads(out.stdout)["engine"]
    assert (engine["selection"], engine["fuga_k"], engine["fuga_lambda"]) == ("fuga", 2, 0.5)


def test_serve_takes_the_same_options():
    out = run_fairbroker("serve", "-s", "drf", *FLAGS, "--role-weight", "pi=2", "--print-config")
    assert out.returncode == 0, out.stderr
    config = yaml.safe_load(out.stdout)
    assert (config["level"], config["trigger"], config["seed"], config["interval"]) == (
        "framework", "release", 3, 0.5)  # fmt: skip
    assert config["refuse_seconds"] == 2 and config["role_weights"] == {"pi": 2.0}
    assert (config["fuga_k"], config["fuga_lambda"]) == (2, 0.5)


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
    assert EngineConfig.mesos() == EngineConfig() and EngineConfig().scheduler == "rpsdsf"
    assert EngineConfig.mesos("drf") == EngineConfig("drf")
    flat = EngineConfig.flat("bfdrf")
    assert (str(flat.level), str(flat.trigger), str(flat.effective_selection)) == (
        "framework", "release", "bestfit")  # fmt: skip


def _default(param):
    """An option's default, None when it has none (click 8.3+ says so with its UNSET)."""
    import click.core

    unset = getattr(click.core, "UNSET", None)
    return None if unset is not None and param.default is unset else param.default


def test_every_field_is_an_option_with_the_fields_default():
    """The options are EngineConfig's fields: one per field, named after it, with its
    default (sim: every field; fill: the offline ones, --scheduler required)."""
    from dataclasses import fields

    from allocator.cli import cli
    from allocator.engine_config import default_of

    offline = {"scheduler", "mode", "selection", "ties", "seed", "fuga_k", "fuga_lambda"}
    for command, names in (("sim", None), ("fill", offline)):
        params = {p.name: p for p in cli.commands[command].params}
        for item in fields(EngineConfig):
            if names is not None and item.name not in names:
                assert item.name not in params, (command, item.name)
                continue
            param = params[item.name]
            if item.name == "role_weights":
                assert param.multiple and param.opts == ["--role-weight"]
            elif item.name == "protected_groups":
                assert param.multiple and param.opts == ["--protected-group"]
                assert tuple(_default(param)) == ()
            elif command == "fill" and item.name == "scheduler":
                assert param.required and _default(param) is None
            else:
                assert _default(param) == default_of(item), (command, item.name)
                assert param.opts[0] == "--" + item.name.replace("_", "-")
    assert EngineConfig().scheduler == "rpsdsf"


def test_serve_keys_are_the_fields_with_their_defaults_and_ranges():
    from dataclasses import fields

    from allocator.cli.serve_config import ConfigError, ServeConfig, load_serve_config

    config = ServeConfig()
    for item in fields(EngineConfig):
        assert item.name in ServeConfig.model_fields
        if item.name == "reclaim_after":  # a long-running broker holds the fair share
            assert (config.reclaim_after, EngineConfig().reclaim_after) == (30, 0)
            continue
        assert getattr(config, item.name) == getattr(EngineConfig(), item.name), item.name
    assert config.engine_config() == EngineConfig(reclaim_after=30)
    # a range from EngineConfig's declaration, and its own check, both name the source
    with pytest.raises(ConfigError, match=r"^interval \(from FAIRBROKER_INTERVAL\): .*greater"):
        load_serve_config({}, None, {"FAIRBROKER_INTERVAL": "0"})
    with pytest.raises(ConfigError, match=r"^role_weights \(from --role-weight\): a: must be in"):
        load_serve_config({"role_weights": ["a=0"]}, None, {})


def test_sim_help_states_the_slots_default_the_code_uses():
    from allocator.policy.slots import DEFAULT_SLOTS_PER_SERVER

    out = run_fairbroker("sim", "--help")
    assert out.returncode == 0
    assert f"(default {DEFAULT_SLOTS_PER_SERVER})" in " ".join(out.stdout.split())
