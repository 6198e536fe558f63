"""`fairbroker serve --config`: flags > FAIRBROKER_* > file > defaults, one-line errors
naming the key, secrets masked, and a real `serve` started from a file and the environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from support.commands import run_fairbroker
from support.serving import stop_gracefully

from allocator.cli.serve_config import (
    MASK,
    ConfigError,
    ServeConfig,
    load_serve_config,
    unknown_env,
)

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "deploy" / "fairbroker.yaml"


def printed(*args: str, env: dict[str, str] | None = None) -> tuple[dict, dict]:
    """`fairbroker serve --print-config` in a subprocess: the values and their sources."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FAIRBROKER_")}
    done = subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", "serve",
         "--print-config", *args],
        capture_output=True, text=True, timeout=60, env={**environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    values = yaml.safe_load(done.stdout)
    sources = dict(re.findall(r"^(\w+):.*# (.+)$", done.stdout, re.M))
    return values, sources


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("port: 7100\ngrpc_port: 7101\nmetrics_port: 7102\nscheduler: drf\n")
    env = {"FAIRBROKER_GRPC_PORT": "7201", "FAIRBROKER_METRICS_PORT": "7202"}
    values, sources = printed("--config", str(config), "--metrics-port", "7302", env=env)
    assert (values["port"], sources["port"]) == (7100, f"file {config}")
    assert (values["grpc_port"], sources["grpc_port"]) == (7201, "FAIRBROKER_GRPC_PORT")
    assert (values["metrics_port"], sources["metrics_port"]) == (7302, "--metrics-port")
    assert (values["lease"], sources["lease"]) == (30.0, "default")
    assert values["scheduler"] == "drf"
    # the file also comes from FAIRBROKER_CONFIG; its relative paths are relative to it
    config.write_text("state_dir: state\n")
    values, _ = printed(env={"FAIRBROKER_CONFIG": str(config)})
    assert values["state_dir"] == str(tmp_path / "state")


def test_every_option_has_an_environment_variable() -> None:
    """Each key of ServeConfig is read from FAIRBROKER_<KEY> (a value unlike its default)."""
    samples = {
        "scheduler": "drf", "mode": "oblivious", "selection": "joint", "ties": "waste",
        "host": "127.0.0.2", "port": "1", "grpc_port": "2", "metrics": "false",
        "metrics_port": "3", "state_dir": "/srv/fb", "cluster": "/srv/c.yaml",
        "token": "t0k", "token_file": None, "lease": "9", "log_level": "debug",
        "teardown_on_exit": "true", "backend": "mesos", "master": "m:5050", "roles": "a, b",
        "principal": "p", "secret_file": "/srv/secret", "failover_timeout": "60",
        "framework_name": "fb2", "user": "spark", "allow_root": "true", "hostname": "h1",
        "webui_url": "http://h1/", "gpus": "true", "spark_home": "/srv/spark",
        "spark_uri": "http://h1/spark.tgz", "executor_env": "OMP_NUM_THREADS,MKL_NUM_THREADS",
        "executor_python": "/opt/py/bin/python3", "limits": "max_tenants=5,max_weight=10",
        "state_recover": "true", "metrics_token": "true", "level": "framework",
        "trigger": "release", "seed": "7", "interval": "0.5", "refuse_seconds": "2",
        "role_weights": "pi=2,wc=1", "fuga_k": "4", "fuga_lambda": "0.5",
        "reclaim_after": "0", "reclaim_grace": "3", "reclaim_min_runtime": "1",
        "reclaim_per_run": "2", "reclaim_per_minute": "9", "protected_groups": "prod, etl",
        "ha": None,
        "sandbox": "bwrap", "sandbox_user": "fbexec", "sandbox_hide": "/srv/a, /srv/b",
        "sandbox_cpu": "quota",
        "tls_cert": "/srv/tls.crt", "tls_key": "/srv/tls.key", "tls_ca": "/srv/ca.crt",
        "grpc_connections_per_address": "4",
    }  # fmt: skip
    assert set(samples) == set(ServeConfig.model_fields)
    env = {f"FAIRBROKER_{k.upper()}": v for k, v in samples.items() if v is not None}
    config, sources = load_serve_config({}, None, env)
    for key, text in samples.items():
        if text is None:  # token_file excludes token, ha state_recover: each on its own below
            continue
        assert sources[key] == f"FAIRBROKER_{key.upper()}"
        assert getattr(config, key) != ServeConfig.model_fields[key].default, key
    assert config.roles == ("a", "b") and config.port == 1 and config.metrics is False
    hidden = config.sandbox_config().hide  # the secret file is hidden from executors too
    assert hidden == (Path("/srv/secret"), Path("/srv/tls.key"), Path("/srv/a"), Path("/srv/b"))
    assert config.sandbox_config().cpu == "quota"
    engine = config.engine_config()  # FUGA's K and lambda reach the engine's configuration
    assert (engine.fuga_k, engine.fuga_lambda) == (4, 0.5)
    assert engine.protected_groups == ("etl", "prod") and engine.reclaim_after == 0
    env = {"FAIRBROKER_TOKEN_FILE": "/srv/token"}
    assert load_serve_config({}, None, env)[0].token_file == Path("/srv/token")
    env = {"FAIRBROKER_HA": "zk://z1:2181,z2:2181/fb"}
    assert load_serve_config({}, None, env)[0].ha == "zk://z1:2181,z2:2181/fb"
    env = {"FAIRBROKER_HA": "zk://z1:2181,z2:2181/fb"}
    assert load_serve_config({}, None, env)[0].ha == "zk://z1:2181,z2:2181/fb"


def test_flag_defaults_shown_in_help_are_the_schemas() -> None:
    from allocator.cli.live import SERVE_DEFAULTS

    for key, value in SERVE_DEFAULTS.items():
        default = ServeConfig.model_fields[key].default
        assert str(value) == str(getattr(default, "value", default)), key


@pytest.mark.parametrize(
    ("file_text", "env", "flags", "expected"),
    [
        ("bogus: 1\n", {}, [], r"^bogus \(from file .*\): unknown key \(did you mean gpus\?\)$"),
        ("port: [1]\n", {}, [], r"^port \(from file .*\): Input should be a valid integer"),
        ("lease: 0.5\n", {}, [], r"^lease \(from file .*\): .*greater than or equal to 1"),
        ("", {"FAIRBROKER_METRICS": "maybe"}, [], r"^metrics \(from FAIRBROKER_METRICS\): "),
        ("scheduler: fifo\n", {}, [], r"^scheduler \(from file .*\): unknown 'fifo' \(known: drf"),
        ("backend: mesos\n", {}, [], r"^master: --backend mesos needs a master"),
        ("", {}, ["--master", "m:5050"], r"^master \(from --master\): only with backend mesos"),
        ("- a\n", {}, [], r"expected a mapping of serve options"),
        (
            "sandbox_cpu: hard\n",
            {},
            [],
            r"^sandbox_cpu \(from file .*\): Input should be 'off', 'shares' or 'quota'",
        ),
        ("port: [\n", {}, [], r"malformed YAML at line 2"),
    ],
)
def test_bad_configuration_is_one_line_naming_the_key(
    tmp_path: Path, file_text: str, env: dict, flags: list[str], expected: str
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(file_text)
    done = subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", "serve",
         "--config", str(config), "--print-config", *flags],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.search(expected, lines[0].removeprefix("fairbroker: error: ")), lines[0]


def test_sandbox_cpu_is_shares_by_default_and_shown_with_its_source() -> None:
    """The executors' CPU mode: shares unless asked, from the flag or the environment, in
    --print-config; the sandbox configuration the backend gets carries it."""
    values, sources = printed()
    assert values["sandbox_cpu"] == "shares" and sources["sandbox_cpu"] == "default"
    values, sources = printed("--sandbox-cpu", "quota")
    assert values["sandbox_cpu"] == "quota" and sources["sandbox_cpu"] == "--sandbox-cpu"
    values, sources = printed(env={"FAIRBROKER_SANDBOX_CPU": "off"})
    assert values["sandbox_cpu"] == "off" and sources["sandbox_cpu"] == "FAIRBROKER_SANDBOX_CPU"
    config, _ = load_serve_config({}, None, {})
    assert config.sandbox_config().cpu == "shares"


def test_secrets_are_masked_and_runtime_checks_name_the_key(tmp_path: Path) -> None:
    values, sources = printed("--token", "hunter2-secret")
    assert values["token"] == MASK and sources["token"] == "--token"
    config, _ = load_serve_config({"token": "hunter2-secret"}, None, {})
    assert "hunter2" not in config.render({}) and "hunter2" not in repr(config)

    missing = tmp_path / "nope"
    config, _ = load_serve_config({"token_file": str(missing)}, None, {})
    with pytest.raises(ConfigError, match=r"^token_file: cannot read .*nope \(No such file"):
        config.check_runtime()
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    config, _ = load_serve_config({"state_dir": str(blocker / "state")}, None, {})
    with pytest.raises(ConfigError, match=r"^state_dir: cannot create .*a-file/state"):
        config.check_runtime()
    (tmp_path / "empty").write_text("\n")
    flags = {"backend": "mesos", "master": "m:5050", "principal": "p",
             "secret_file": str(tmp_path / "empty"), "state_dir": str(tmp_path / "s")}  # fmt: skip
    config, _ = load_serve_config(flags, None, {})
    with pytest.raises(ConfigError, match=r"^secret_file: .*empty is empty$"):
        config.check_runtime()
    # through the CLI: one line, exit 2
    done = run_fairbroker("serve", "--token-file", str(missing), "--state-dir", str(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("fairbroker: error: token_file: cannot read")


def test_executors_never_run_as_root_unless_allowed(tmp_path: Path) -> None:
    flags = {"backend": "mesos", "master": "m:5050", "user": "root", "state_dir": str(tmp_path)}
    config, _ = load_serve_config(flags, None, {})
    with pytest.raises(ConfigError, match=r"^user: executors would run as root"):
        config.check_runtime()
    config, _ = load_serve_config({**flags, "allow_root": True}, None, {})
    config.check_runtime()
    config, _ = load_serve_config({**flags, "user": "spark"}, None, {})
    config.check_runtime()
    assert config.task_user == "spark"


def test_safe_exit_defaults_and_framework_settings() -> None:
    local = ServeConfig()
    mesos = ServeConfig(backend="mesos", master="m:5050", host="10.0.0.5", port=7090)
    assert local.teardown is True  # the embedded cluster's executors are the broker's own
    assert mesos.teardown is False  # fail over: Mesos keeps the tasks for a restart
    assert ServeConfig(backend="mesos", master="m", teardown_on_exit=True).teardown is True
    assert mesos.effective_webui_url == "http://10.0.0.5:7090/v1/GetAllocation"
    named = ServeConfig(backend="mesos", master="m", host="0.0.0.0", hostname="broker.example")
    assert named.effective_webui_url.startswith("http://broker.example:7080/")


def test_the_example_file_is_valid_and_documents_every_key() -> None:
    config, _ = load_serve_config({}, EXAMPLE, {})
    assert config.backend == "mesos" and config.user == "spark" and config.teardown is False
    text = EXAMPLE.read_text()
    for key in ServeConfig.model_fields:
        assert re.search(rf"^#? ?{key}:", text, re.M), f"{key} is not in {EXAMPLE.name}"


def test_serve_runs_from_a_file_and_the_environment_and_stops_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text("port: 0\ngrpc_port: 0\nmetrics: false\nstate_dir: state\n")
    (tmp_path / "token").write_text("s3cret\n")
    env = {**os.environ, "FAIRBROKER_TOKEN_FILE": str(tmp_path / "token")}
    log = tmp_path / "serve.log"
    command = [sys.executable, "-c", "from allocator.cli import main; main()", "serve",
               "--config", str(config)]  # fmt: skip
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 30
        found = None
        while found is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
            found = re.search(r"serving on http://([\d.]+:\d+)", log.read_text())
        assert found, log.read_text()
        with urllib.request.urlopen(f"http://{found.group(1)}/healthz", timeout=10) as answer:
            assert answer.status == 200
        request = urllib.request.Request(f"http://{found.group(1)}/v1/GetAllocation")
        with pytest.raises(urllib.error.HTTPError) as refused:  # the token from the env file
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code in (401, 403)
        assert (tmp_path / "state" / "broker.sqlite").exists()
        assert stop_gracefully(process) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    text = log.read_text()
    assert "stopping the broker, its executors with it" in text
    # One start line and one stop line of the broker's own, not uvicorn's once per server.
    assert "Started server process" not in text and "Finished server process" not in text
    assert text.count("serving on http://") == 1


@pytest.mark.parametrize(
    ("flags", "file", "message"),
    [({"token": ""}, None, "token (from --token): must not be empty"),
     ({}, "token: '  '\n", "token (from file"),
     ({}, "schedulr: drf\n", "schedulr (from file"),
     ({}, "schedulr: drf\n", "unknown key (did you mean scheduler?)")],
)  # fmt: skip
def test_an_empty_token_or_a_misspelt_key_is_refused(tmp_path, flags, file, message) -> None:
    path = None
    if file is not None:
        path = tmp_path / "serve.yaml"
        path.write_text(file)
    with pytest.raises(ConfigError) as error:
        load_serve_config(flags, path, {})
    assert message in str(error.value)


def test_unknown_fairbroker_variables_are_named_with_the_one_meant() -> None:
    environ = {"FAIRBROKER_SCHEDULR": "drf", "FAIRBROKER_BROKER": "h:7080",
               "FAIRBROKER_TOKEN": "x", "FAIRBROKER_ZZZ": "1", "OTHER": "1"}  # fmt: skip
    assert unknown_env(environ) == [
        "FAIRBROKER_SCHEDULR is not a setting (did you mean FAIRBROKER_SCHEDULER?); ignored",
        "FAIRBROKER_ZZZ is not a setting; ignored",
    ]
    done = subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", "serve",
         "--print-config"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "FAIRBROKER_INTERVALL": "5"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == (
        "fairbroker: warning: FAIRBROKER_INTERVALL is not a setting (did you mean "
        "FAIRBROKER_INTERVAL?); ignored"
    )
