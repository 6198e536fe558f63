"""The operator's commands against a TLS broker (issue 25): a real `fairbroker serve` with a
CA and a 127.0.0.1 certificate made in the test (`cryptography`), and the real CLI
(`status`, `configure`, `explain`) with `--ca-file`, with `FAIRBROKER_CA_FILE`, and from
serve's own configuration file (`--config`: address, token_file, tls_ca); without the CA, or
trusting another one, they stop with one line saying so."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.pki import make_ca, make_server_cert
from support.polling import free_port, wait_for
from support.serving import stop_gracefully

from allocator.broker.tls import TlsError, TlsFiles

FAIRBROKER = str(Path(sys.executable).parent / "fairbroker")
TOKEN = "tls-s3cret"


class Broker:
    def __init__(self, config: Path, ca: Path, other_ca: Path, http: int, grpc: int) -> None:
        self.config, self.ca, self.other_ca = config, ca, other_ca
        self.http, self.grpc = f"127.0.0.1:{http}", f"127.0.0.1:{grpc}"


def _healthy(address: str, ca: Path) -> bool:
    context = ssl.create_default_context(cafile=str(ca))
    try:
        with urllib.request.urlopen(f"https://{address}/healthz", timeout=2, context=context):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    base = tmp_path_factory.mktemp("cli-tls")
    ca, ca_key, ca_name = make_ca(base, "test-ca")
    other, _, _ = make_ca(base, "other-ca")
    files = make_server_cert(base, ca_key, ca_name)
    (base / "token").write_text(TOKEN + "\n")
    (base / "cluster.yaml").write_text(
        "agents:\n  - {name: a1, hostname: 127.0.0.1, resources: {cpus: 4, mem: 4096}}\n"
    )
    http, grpc = free_port(), free_port()
    config = base / "serve.yaml"
    config.write_text(
        f"port: {http}\ngrpc_port: {grpc}\nmetrics: false\nstate_dir: state\n"
        f"cluster: cluster.yaml\ntoken_file: token\nsandbox: none\n"
        f"tls_cert: {files.cert}\ntls_key: {files.key}\ntls_ca: {ca}\n"
    )
    log = base / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRBROKER_")}
    serve = subprocess.Popen(
        [FAIRBROKER, "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=log.open("wb"), env=env, cwd=base,
    )  # fmt: skip
    try:
        address = f"127.0.0.1:{http}"
        wait_for(lambda: _healthy(address, ca) or serve.poll() is not None, 60, "serve up")
        assert serve.poll() is None, log.read_text()
        yield Broker(config, ca, other, http, grpc)
    finally:
        stop_gracefully(serve)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FAIRBROKER_")}
    return subprocess.run(
        [FAIRBROKER, *args], capture_output=True, text=True, timeout=60, env={**base, **(env or {})}
    )


@pytest.mark.parametrize("port", ["http", "grpc"])
def test_status_configure_and_explain_with_the_ca_file(broker: Broker, port: str) -> None:
    address = getattr(broker, port)
    common = ["--broker", address, "--token", TOKEN, "--ca-file", str(broker.ca)]
    done = cli("status", *common)
    assert done.returncode == 0, done.stderr
    assert "scheduler" in done.stdout and "a1" in done.stdout and "127.0.0.1" in done.stdout
    done = cli("configure", *common, "--scheduler", "drf")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("scheduler drf,"), done.stdout
    done = cli("explain", "nobody-here", *common)
    # the broker's own answer about an unknown tenant: the call crossed TLS and the token
    assert done.returncode != 0 and "nobody-here" in done.stderr, done.stderr
    assert "TLS" not in done.stderr and "certificate" not in done.stderr


def test_the_ca_from_the_environment_and_everything_from_serves_config(broker: Broker) -> None:
    done = cli("status", "--broker", broker.grpc, "--token", TOKEN,
               env={"FAIRBROKER_CA_FILE": str(broker.ca)})  # fmt: skip
    assert done.returncode == 0 and "a1" in done.stdout, done.stderr
    # serve's file alone: its port, token_file and tls_ca
    done = cli("status", "--config", str(broker.config))
    assert done.returncode == 0 and "a1" in done.stdout, done.stderr
    done = cli("status", env={"FAIRBROKER_CONFIG": str(broker.config)})
    assert done.returncode == 0 and "a1" in done.stdout, done.stderr


def test_without_the_ca_or_with_another_the_cli_says_so(broker: Broker) -> None:
    for address in (broker.http, broker.grpc):
        done = cli("status", "--broker", address, "--token", TOKEN)
        assert done.returncode != 0
        assert f"broker at {address} speaks TLS: give --ca-file" in done.stderr, done.stderr
    done = cli("status", "--broker", broker.http, "--token", TOKEN,
               "--ca-file", str(broker.other_ca))  # fmt: skip
    assert done.returncode != 0
    assert "its certificate does not verify against --ca-file" in done.stderr, done.stderr
    assert "unable to get local issuer certificate" in done.stderr
    # a wrong token still gets the broker's refusal, over TLS
    done = cli("status", "--broker", broker.http, "--token", "wrong",
               "--ca-file", str(broker.ca))  # fmt: skip
    assert done.returncode != 0 and "token" in done.stderr.lower(), done.stderr


def test_serve_refuses_a_certificate_its_tls_ca_did_not_issue(tmp_path: Path) -> None:
    ca, ca_key, ca_name = make_ca(tmp_path, "test-ca")
    other, _, _ = make_ca(tmp_path, "other-ca")
    files = make_server_cert(tmp_path, ca_key, ca_name)
    TlsFiles(files.cert, files.key, ca).check()  # its own CA: fine
    with pytest.raises(TlsError, match=r"does not verify against tls_ca .*other-ca\.crt"):
        TlsFiles(files.cert, files.key, other).check()
    (tmp_path / "junk.crt").write_text("junk\n")
    with pytest.raises(TlsError, match=r"tls_ca: .*junk\.crt is not a readable PEM file"):
        TlsFiles(files.cert, files.key, tmp_path / "junk.crt").check()


def test_submits_checks_reach_the_tls_broker_with_the_ca(broker: Broker) -> None:
    """`fairbroker submit --ca-file`: its checks before Spark starts (the HTTP port, the
    token) go over TLS; without the CA they say the broker speaks TLS."""
    from allocator.broker.address import (
        BrokerAddressError,
        check_submit_address,
        check_submit_token,
    )

    assert check_submit_address(broker.http, broker.ca) == broker.http
    check_submit_token(broker.http, TOKEN, broker.ca)
    with pytest.raises(BrokerAddressError, match="refuses a wrong token"):
        check_submit_token(broker.http, "wrong", broker.ca)
    with pytest.raises(BrokerAddressError, match="speaks TLS: give --ca-file"):
        check_submit_address(broker.http)
    with pytest.raises(BrokerAddressError, match="gRPC port; submit uses its HTTP port"):
        check_submit_address(broker.grpc, broker.ca)


def test_batchs_check_of_a_running_tls_broker(broker: Broker) -> None:
    """`fairbroker batch --broker --ca-file` reads the TLS broker's group weights first."""
    import click

    from allocator.cli.live import BrokerTarget, _check_running_broker
    from allocator.engine_config import EngineConfig

    target = BrokerTarget(broker.http, TOKEN, str(broker.ca))
    _check_running_broker(target, EngineConfig())  # the broker's weights are the batch's
    wanted = EngineConfig().with_default_role_weights({"etl": 3.0})
    with pytest.raises(click.UsageError, match="--role-weight etl=3"):
        _check_running_broker(target, wanted)
