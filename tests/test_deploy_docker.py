"""docker/: the compose file as Debian's docker-compose resolves it, hadolint on every
Dockerfile, and the structure the deployment relies on (paper 002's six agents, healthchecks,
pinned images, no privileged container, the broker's configuration valid for `serve`).

No container engine runs here: images are not built, the tools that need none are run."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import requests
import yaml
from support.polling import free_port, wait_for
from support.real_mesos import SKIP_REASON, mesos_home
from support.serving import stop_gracefully

from allocator.cli.serve_config import load_serve_config

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DEPLOY_BIN = REPO / ".venv-deploy" / "bin"  # `make deploy-tools`
DOCKERFILES = sorted(DOCKER.rglob("Dockerfile"))
# Paper 002 Sec. V: two servers each of (4 CPU, 14 GB), (8 CPU, 8 GB), (6 CPU, 11 GB).
PAPER_AGENTS = Counter({(4, 14 * 1024, "t1"): 2, (8, 8 * 1024, "t2"): 2, (6, 11 * 1024, "t3"): 2})


def tool(name: str) -> str:
    found = shutil.which(name) or (str(DEPLOY_BIN / name) if (DEPLOY_BIN / name).exists() else None)
    if found is None:
        message = f"{name} is not installed (make system-deps deploy-tools)"
        if os.environ.get("CI"):  # `make test` installs it: missing in CI is a failure
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def resolved() -> dict:
    """docker/compose.yaml with docker/.env, anchors and defaults applied by docker-compose."""
    done = subprocess.run(
        [tool("docker-compose"), "-f", str(COMPOSE), "config"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_hadolint_passes_every_dockerfile() -> None:
    assert {p.parent.name for p in DOCKERFILES} == {"broker", "agent"}
    done = subprocess.run(
        [tool("hadolint"), *map(str, DOCKERFILES)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # every rule switched off is explained on the lines just above it
    for dockerfile in DOCKERFILES:
        lines = dockerfile.read_text().splitlines()
        for i, line in enumerate(lines):
            if "hadolint ignore" in line:
                rule = line.split("=", 1)[1]
                context = "\n".join(lines[max(0, i - 12) : i])
                assert rule in context or "Unpinned apt" in context, f"{dockerfile}:{i + 1}"


def test_checkov_passes_every_dockerfile_and_every_skip_is_justified() -> None:
    done = subprocess.run(
        [tool("checkov"), "-d", str(DOCKER), "--framework", "dockerfile", "--skip-download",
         "-o", "json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(done.stdout)
    failed = [(c["check_id"], c["file_path"]) for c in report["results"]["failed_checks"]]
    assert report["summary"]["failed"] == 0 and not failed, failed
    assert report["summary"]["passed"] > 100 and done.returncode == 0
    scanned = {c["file_path"].lstrip("/") for c in report["results"]["passed_checks"]}
    assert scanned == {str(p.relative_to(DOCKER)) for p in DOCKERFILES}
    for dockerfile in DOCKERFILES:
        for skip in re.findall(r"#checkov:skip=([^\n]*)", dockerfile.read_text()):
            check, _, reason = skip.partition(":")
            assert re.fullmatch(r"CKV2?_DOCKER_\d+", check) and len(reason) > 30, skip


def test_agents_are_paper_002s_six_servers(resolved: dict) -> None:
    agents = {n: s for n, s in resolved["services"].items() if n.startswith("agent-")}
    found: Counter = Counter()
    for name, service in agents.items():
        env = service["environment"]
        resources = dict(r.split(":") for r in env["MESOS_RESOURCES"].split(";"))
        attributes = dict(a.split(":") for a in env["MESOS_ATTRIBUTES"].split(";"))
        found[(float(resources["cpus"]), float(resources["mem"]), attributes["type"])] += 1
        assert env["MESOS_MASTER"] == "mesos-master:5050"  # not through ZooKeeper
        assert env["MESOS_HOSTNAME"] == service["hostname"] == name
        assert service["depends_on"]["mesos-master"]["condition"] == "service_healthy"
    assert found == PAPER_AGENTS


def test_every_service_is_healthchecked_pinned_and_unprivileged(resolved: dict) -> None:
    env_file = dict(
        line.split("=", 1) for line in (DOCKER / ".env").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
    # nothing secret is committed: no password, secret or token in .env or compose.yaml
    for key in env_file:
        assert not re.search(r"PASSWORD|SECRET|TOKEN|CREDENTIAL", key), key
    text = (DOCKER / "compose.yaml").read_text() + (DOCKER / ".env").read_text()
    assert "change-me" not in text and "admin:admin" not in text
    for name, service in resolved["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|TOKEN|CREDENTIAL", key):  # a file, never a value
                assert key.endswith(("_FILE", "CREDENTIALS", "CREDENTIAL")), (name, key)
                assert str(value).startswith("/run/"), (name, key)
    for name, service in resolved["services"].items():
        assert service.get("healthcheck", {}).get("test"), f"{name}: no healthcheck"
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest" and re.search(r"\d", tag), image
        if "build" not in service:  # a published image: its version comes from .env
            assert image in env_file.values() or "@sha256:" in image, image
        assert not service.get("privileged"), f"{name} is privileged"
        assert not service.get("cap_add"), name
        for port in service.get("ports", []):  # admin ports stay on the host's loopback
            assert str(port).startswith("127.0.0.1:"), (name, port)
        for dependency in service.get("depends_on", {}).values():
            assert dependency["condition"] in (
                "service_healthy", "service_completed_successfully", "service_started"
            )  # fmt: skip


def test_the_broker_is_a_mesos_framework_with_its_role_quota_and_a_valid_config(
    resolved: dict, tmp_path: Path
) -> None:
    services = resolved["services"]
    broker = services["broker"]
    env = {k: str(v) for k, v in broker["environment"].items()}
    config, sources = load_serve_config({}, None, env)  # what the container's serve reads
    assert config.backend == "mesos" and config.teardown is False  # stop = failover
    assert config.task_user != "root"
    assert set(sources) == {k.removeprefix("FAIRBROKER_").lower() for k in env}
    setup = " ".join(services["mesos-setup"]["command"])
    quota = re.search(r"-d '(.*)'", setup).group(1)
    body = yaml.safe_load(quota)
    (quota_config,) = body["update_quota"]["quota_configs"]
    assert body["type"] == "UPDATE_QUOTA" and (quota_config["role"],) == config.roles
    assert broker["depends_on"]["mesos-setup"]["condition"] == "service_completed_successfully"
    assert broker["stop_signal"] == "SIGTERM"
    # Prometheus and Grafana provisioned from deploy/
    mounts = [v.split(":")[0] for s in ("prometheus", "grafana") for v in services[s]["volumes"]]
    assert str(REPO / "deploy" / "alerts.yml") in mounts
    assert str(REPO / "deploy" / "grafana" / "fairbroker.json") in mounts
    scrape = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = scrape["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["broker:7082", "broker-b:7082"]
    job = scrape["scrape_configs"][0]
    assert job["scheme"] == "https"
    assert job["tls_config"]["ca_file"] == "/etc/prometheus/fairbroker-ca/ca.crt"
    assert volume_at(services["prometheus"], "/etc/prometheus/fairbroker-ca") == "broker-ca"


def test_two_brokers_elect_a_leader_in_the_clusters_zookeeper(resolved: dict) -> None:
    """broker and broker-b: the same configuration but their names, state volumes and host
    ports, both with FAIRBROKER_HA on the compose ZooKeeper, which shares their network."""
    services = resolved["services"]
    configs = {}
    for name in ("broker", "broker-b"):
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        configs[name] = load_serve_config({}, None, env)[0]
        assert configs[name].ha == "zk://zookeeper:2181/fairbroker"
        assert set(services[name]["networks"]) & set(services["zookeeper"]["networks"])
    a, b = configs["broker"], configs["broker-b"]
    assert (a.hostname, b.hostname) == ("broker", "broker-b")
    assert a.model_dump(exclude={"hostname"}) == b.model_dump(exclude={"hostname"})
    assert volume_at(services["broker"], "/var/lib/fairbroker") != volume_at(
        services["broker-b"], "/var/lib/fairbroker"
    )
    # docker-compose 1.29 resolves ports as "127.0.0.1:7080:7080/tcp"
    published = [{p.split(":")[1] for p in services[n]["ports"]} for n in ("broker", "broker-b")]
    assert published == [{"7080", "7081", "7082"}, {"7090", "7091", "7092"}]
    assert services["broker-b"]["healthcheck"] == services["broker"]["healthcheck"]


def volume_at(service: dict, directory: str) -> str:
    (name,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == directory]
    return name


def run_secrets(resolved: dict, root: Path) -> dict[str, Path]:
    """docker/make_secrets.py run as the `secrets` service runs it, each of its directories moved
    under root; {container directory: local directory}."""
    service = resolved["services"]["secrets"]
    args = list(service["command"])
    moved = {}
    for i, arg in enumerate(args):
        key, _, value = arg.partition("=")
        if value.startswith("/run/"):
            moved[value] = root / value.strip("/").replace("/", "_")
            args[i] = f"{key}={moved[value]}"
    script = DOCKER / "make_secrets.py"
    assert f"{script}:/opt/make_secrets.py:ro" in service["volumes"]
    assert service["entrypoint"] == ["python", "/opt/make_secrets.py"]
    subprocess.run([sys.executable, str(script), *args], check=True, timeout=30)
    return moved


def test_secrets_are_drawn_at_first_start_kept_and_mounted_only_where_needed(
    resolved: dict, tmp_path: Path
) -> None:
    """The broker's tenant API listens beyond loopback and Mesos requires credentials: the
    one-shot `secrets` service draws every secret into its own volume before anything starts,
    and each service mounts only the volumes it needs."""
    services = resolved["services"]
    broker, maker, client = services["broker"], services["secrets"], services["client"]
    config, _ = load_serve_config({}, None, {k: str(v) for k, v in broker["environment"].items()})
    assert config.token_file is not None and config.token is None
    assert config.principal == "fairbroker" and config.secret_file is not None
    runtime = (DOCKER / "broker" / "Dockerfile").read_text().split("AS runtime", 1)[1]
    assert re.search(r"^\s+FAIRBROKER_HOST=0\.0\.0\.0", runtime.split("AS client")[0], re.M)
    assert maker["restart"] == "no" and maker["network_mode"] == "none"
    for name in ("broker", "broker-b", "mesos-master", "grafana"):
        condition = services[name]["depends_on"]["secrets"]["condition"]
        assert condition == "service_completed_successfully", name
    # who mounts which secret volume
    secret_volumes = {v.split(":")[0] for v in maker["volumes"]} - {str(DOCKER / "make_secrets.py")}
    mounts = {
        name: {v.split(":")[0] for v in s.get("volumes", [])} & secret_volumes
        for name, s in services.items() if name != "secrets"
    }  # fmt: skip
    agents = {n for n in services if n.startswith("agent-")}
    assert mounts == {
        **{n: set() for n in services if n != "secrets"},
        "broker": {"broker-token", "broker-mesos", "broker-tls"},
        "broker-b": {"broker-token", "broker-mesos", "broker-tls"},  # the same framework
        # the drivers: the tenant token and the CA, not the Mesos secret nor the TLS key
        "client": {"broker-token", "broker-ca"},
        "prometheus": {"broker-ca"},  # scrapes /metrics over HTTPS
        "mesos-setup": {"broker-mesos"},
        "mesos-master": {"mesos-credentials"},
        "grafana": {"grafana-admin"},
        **{n: {"agent-credential"} for n in agents},
    }
    token_dir = str(config.token_file.parent)
    assert volume_at(broker, token_dir) == volume_at(maker, token_dir) == "broker-token"
    assert volume_at(client, token_dir) == "broker-token"
    # the client's entrypoint exports the token for every fairbroker command
    script = client["entrypoint"][2].replace("$$", "$")
    assert f'FAIRBROKER_TOKEN="$(cat {config.token_file})" exec fairbroker "$@"' == script
    grafana = services["grafana"]["environment"]
    assert "GF_SECURITY_ADMIN_PASSWORD" not in grafana
    assert grafana["GF_SECURITY_ADMIN_PASSWORD__FILE"] == "/run/grafana/admin-password"

    # the program itself: random secrets, consistent credentials, kept on a rerun
    moved = run_secrets(resolved, tmp_path)
    token = moved[token_dir] / config.token_file.name
    mesos_secret = moved[str(config.secret_file.parent)] / config.secret_file.name
    master_env = services["mesos-master"]["environment"]
    agent_env = services["agent-t1-a"]["environment"]
    credentials = moved["/run/mesos"] / Path(master_env["MESOS_CREDENTIALS"]).name
    credential = moved["/run/mesos-agent"] / Path(agent_env["MESOS_CREDENTIAL"]).name
    password = moved["/run/grafana"] / "admin-password"
    first = {p: p.read_text() for p in (token, mesos_secret, credentials, credential, password)}
    for path, text in first.items():
        assert path.stat().st_mode & 0o777 == 0o400, path
        assert len(text.strip()) >= 32 and "change-me" not in text, path
    entries = json.loads(first[credentials])["credentials"]
    assert entries == [
        json.loads(first[credential]),
        {"principal": config.principal, "secret": first[mesos_secret].strip()},
    ]
    assert entries[0]["secret"] != entries[1]["secret"]
    if os.geteuid() == 0:  # handed to the readers' users, as in the container
        assert (token.stat().st_uid, mesos_secret.stat().st_uid, password.stat().st_uid) == (
            10001, 10001, 472
        )  # fmt: skip
    run_secrets(resolved, tmp_path)
    assert {p: p.read_text() for p in first} == first
    token.unlink()
    credential.unlink()
    run_secrets(resolved, tmp_path)
    assert token.read_text() != first[token]
    # a new agent secret: the masters' credentials follow it
    assert (
        json.loads(credentials.read_text())["credentials"][0]
        == json.loads(credential.read_text())
        != json.loads(first[credential])
    )


def _handshake(cert: Path, key: Path, ca: Path, name: str) -> None:
    """A TLS handshake in memory: a client trusting only `ca`, asking for `name`."""
    import ssl

    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(ca))
    a, b = ssl.MemoryBIO(), ssl.MemoryBIO()
    ends = [client.wrap_bio(a, b, server_hostname=name), server.wrap_bio(b, a, server_side=True)]
    for _ in range(10):
        finished = 0
        for end in ends:
            try:
                end.do_handshake()
                finished += 1
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
        if finished == 2:
            return
    raise AssertionError("no handshake")


def test_the_brokers_serve_tls_with_a_ca_drawn_at_first_start(
    resolved: dict, tmp_path: Path
) -> None:
    """`secrets` draws a CA and a certificate for broker, broker-b, localhost and 127.0.0.1;
    the brokers' configuration points at them, the clients get the CA alone; a real `serve`
    with those files answers its own healthcheck script over HTTPS."""
    import ssl

    services = resolved["services"]
    env = {k: str(v) for k, v in services["broker"]["environment"].items()}
    config, _ = load_serve_config({}, None, env)
    files = config.tls_files()
    assert files is not None and files.ca is not None
    assert services["client"]["environment"]["FAIRBROKER_CA_FILE"] == "/run/fairbroker-ca/ca.crt"
    moved = run_secrets(resolved, tmp_path)
    here = moved[str(files.cert.parent)]
    cert, key, ca = here / files.cert.name, here / files.key.name, here / files.ca.name
    client_ca = moved["/run/fairbroker-ca"] / "ca.crt"
    assert sorted(p.name for p in here.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]  # no CA key
    assert client_ca.read_text() == ca.read_text() and "PRIVATE" not in client_ca.read_text()
    assert key.stat().st_mode & 0o777 == 0o400
    assert cert.stat().st_mode & 0o777 == ca.stat().st_mode & 0o777 == 0o444
    if os.geteuid() == 0:
        assert key.stat().st_uid == 10001
    for name in ("broker", "broker-b", "localhost", "127.0.0.1"):
        _handshake(cert, key, ca, name)
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        _handshake(cert, key, ca, "mesos-master")
    another = run_secrets(resolved, tmp_path / "another")["/run/fairbroker-ca"] / "ca.crt"
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(cert, key, another, "broker")  # each cluster draws its own CA
    first = {p: p.read_text() for p in (cert, key, ca)}
    run_secrets(resolved, tmp_path)  # kept on a rerun
    assert {p: p.read_text() for p in first} == first
    key.unlink()
    run_secrets(resolved, tmp_path)  # one missing: all three drawn anew, the copy follows
    assert cert.read_text() != first[cert] and client_ca.read_text() == ca.read_text()

    # a real broker with them, asked by the container's healthcheck script
    port = free_port()
    serve_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRBROKER_")}
    serve_env |= {"FAIRBROKER_TLS_CERT": str(cert), "FAIRBROKER_TLS_KEY": str(key),
                  "FAIRBROKER_TLS_CA": str(ca), "FAIRBROKER_PORT": str(port)}  # fmt: skip
    log = tmp_path / "serve.log"
    serve = subprocess.Popen(
        [str(Path(sys.executable).parent / "fairbroker"), "serve", "--grpc-port", "0",
         "--no-metrics", "--sandbox", "none", "--state-dir", str(tmp_path / "state")],
        env=serve_env, stdout=subprocess.DEVNULL, stderr=log.open("wb"),
    )  # fmt: skip
    check = [sys.executable, str(DOCKER / "broker" / "healthcheck.py")]
    try:
        wait_for(
            lambda: serve.poll() is not None
            or subprocess.run(check, env=serve_env, capture_output=True, timeout=30).returncode
            == 0,
            90, "the healthcheck over HTTPS",
        )  # fmt: skip
        assert serve.poll() is None, log.read_text()
        plain = {k: v for k, v in serve_env.items() if not k.startswith("FAIRBROKER_TLS")}
        done = subprocess.run(check, env=plain, capture_output=True, text=True, timeout=30)
        assert done.returncode == 1, "plain HTTP must not pass against a TLS broker"
    finally:
        stop_gracefully(serve)


def test_agents_share_a_network_with_the_master_and_the_drivers_only(resolved: dict) -> None:
    """The agents run tenants' code: they must not reach ZooKeeper, the broker, Prometheus,
    Alertmanager or Grafana. The master, on two networks, advertises its fixed address on
    the agents' one (an agent ignores a master whose address differs from the one it knows),
    and the broker, on the other, addresses it by name rather than through ZooKeeper (which
    holds the advertised address)."""
    services = resolved["services"]
    networks = {name: set(s.get("networks", {})) for name, s in services.items()}
    agents = {n for n in services if n.startswith("agent-")}
    for name in agents:
        assert networks[name] == {"mesos"}, name
    assert {n for n, nets in networks.items() if "mesos" in nets} - agents == {
        "mesos-master", "client"
    }  # fmt: skip
    assert networks["client"] == {"tenant", "mesos"}  # the broker's API, the executors
    for name in ("zookeeper", "prometheus", "alertmanager", "grafana", "mesos-setup"):
        assert networks[name] == {"control"}, name
    assert networks["broker"] == {"control", "tenant"}
    master = services["mesos-master"]
    address = master["networks"]["mesos"]["ipv4_address"]
    assert master["environment"]["MESOS_ADVERTISE_IP"] == address
    (subnet,) = [c["subnet"] for c in resolved["networks"]["mesos"]["ipam"]["config"]]
    assert ipaddress.ip_address(address) in ipaddress.ip_network(subnet)
    assert services["broker"]["environment"]["FAIRBROKER_MASTER"] == "mesos-master:5050"


def test_mesos_requires_authentication_of_agents_frameworks_and_http(resolved: dict) -> None:
    services = resolved["services"]
    master = services["mesos-master"]["environment"]
    assert {k: master[k] for k in master if "AUTH" in k} == {
        "MESOS_AUTHENTICATE_AGENTS": "true",
        "MESOS_AUTHENTICATE_FRAMEWORKS": "true",
        "MESOS_AUTHENTICATE_HTTP_FRAMEWORKS": "true",
        "MESOS_HTTP_FRAMEWORK_AUTHENTICATORS": "basic",
        "MESOS_AUTHENTICATE_HTTP_READONLY": "true",
        "MESOS_AUTHENTICATE_HTTP_READWRITE": "true",
    }
    for name in (n for n in services if n.startswith("agent-")):
        env = services[name]["environment"]
        assert env["MESOS_CREDENTIAL"].startswith("/run/mesos-agent/"), name
        # unprivileged containers: the posix launcher and isolators, which need no cgroups (so
        # neither v1, which Mesos 1.11 needs for its cgroups isolators, nor privileges)
        assert (env["MESOS_LAUNCHER"], env["MESOS_ISOLATION"]) == ("posix", "posix/cpu,posix/mem")
        assert env["MESOS_AUTHENTICATE_HTTP_READONLY"] == "true", name
        assert env["MESOS_AUTHENTICATE_HTTP_READWRITE"] == "true", name
    # the quota job authenticates as the broker's principal, the secret read from stdin
    setup = " ".join(services["mesos-setup"]["command"])
    assert "curl -fsS -K - " in setup and "/run/fairbroker-mesos/secret" in setup


def test_prometheus_sends_alerts_to_an_alertmanager_with_a_route(resolved: dict) -> None:
    services = resolved["services"]
    scrape = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    (target,) = scrape["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    host, _, port = target.partition(":")
    assert host == "alertmanager" and port == "9093"
    manager = services["alertmanager"]
    assert f"{REPO / 'deploy' / 'alertmanager.yml'}:/etc/alertmanager/alertmanager.yml:ro" in (
        manager["volumes"]
    )  # fmt: skip
    assert services["prometheus"]["depends_on"]["alertmanager"]["condition"] == "service_healthy"
    config = yaml.safe_load((REPO / "deploy" / "alertmanager.yml").read_text())
    receivers = {r["name"] for r in config["receivers"]}
    assert config["route"]["receiver"] in receivers
    routes = {r["matchers"][0]: r["receiver"] for r in config["route"]["routes"]}
    assert routes == {'severity="critical"': "page", 'severity="warning"': "ticket"}
    # every alert has a severity that a route names, and a runbook entry under its name
    rules = yaml.safe_load((REPO / "deploy" / "alerts.yml").read_text())
    operations = (REPO / "docs" / "operations.md").read_text()
    for rule in rules["groups"][0]["rules"]:
        assert f'severity="{rule["labels"]["severity"]}"' in routes, rule["alert"]
        assert f"\n#### {rule['alert']}\n" in operations, rule["alert"]
    done = subprocess.run(  # Debian's prometheus-alertmanager (make system-deps)
        [tool("amtool"), "check-config", str(REPO / "deploy" / "alertmanager.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfiles_build_what_the_project_ships() -> None:
    broker = (DOCKER / "broker" / "Dockerfile").read_text()
    agent = (DOCKER / "agent" / "Dockerfile").read_text()
    assert "scripts/install_pymesos.py" in broker  # pymesos the project's way
    assert "spark_shim.jvm.build" in broker  # the plugin jar, in the build stage
    final = broker.split("AS runtime", 1)[1].split("AS client", 1)[0]
    assert re.search(r"^USER [1-9]\d*:[1-9]\d*$", final, re.M)  # non-root
    assert "HEALTHCHECK" in final
    assert "/healthz" in (DOCKER / "broker" / "healthcheck.py").read_text()
    # the agents' Spark is the version the plugin is built against
    pyspark = next(
        d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
            "optional-dependencies"]["spark"] if d.startswith("pyspark==")
    )  # fmt: skip
    version = pyspark.split("==")[1]
    env = (DOCKER / ".env").read_text()
    assert f"SPARK_VERSION={version}\n" in env
    assert f"ARG SPARK_VERSION={version}\n" in agent and f"ARG SPARK_VERSION={version}\n" in broker
    assert "openjdk-17" in agent and "python3" in agent
    assert re.search(r"mesos-\$\{MESOS_VERSION\}\.tar\.gz", agent) and "sha512sum -c" in agent
    # the build context is the repository root: no virtualenvs or git history in it
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".venv-*", "results"} <= set(ignored)


def test_the_compose_mesos_authentication_on_a_real_master_and_agents(
    resolved: dict, tmp_path: Path
) -> None:
    """A real Mesos 1.11.0 master and agents (the machine's build, tests/support/real_mesos.py)
    on loopback, configured by the MESOS_* variables exactly as compose.yaml sets them, with
    the credentials docker/make_secrets.py draws: an agent with the credential registers, one
    without is refused; HTTP endpoints and the v1 scheduler API want credentials (the broker's
    principal gets in, a wrong secret does not); /health, the containers' healthcheck, does
    not; the quota job's own command sets the quota as the broker's principal."""
    home = mesos_home()
    if home is None:
        pytest.skip(SKIP_REASON)
    services = resolved["services"]
    moved = run_secrets(resolved, tmp_path / "secrets")

    def env_of(service: str, drop: set[str]) -> dict[str, str]:
        env = {k: str(v) for k, v in services[service]["environment"].items()}
        env = {k: v for k, v in env.items() if k.startswith("MESOS_") and k not in drop}
        for key, value in env.items():  # the secrets' volumes are directories here
            for directory, local in moved.items():
                if value.startswith(directory + "/"):
                    env[key] = str(local / value.removeprefix(directory + "/"))
        return {"PATH": os.environ["PATH"], **env}

    # where the processes listen and what they advertise: loopback here
    placed = {"MESOS_ZK", "MESOS_HOSTNAME", "MESOS_PORT", "MESOS_WORK_DIR", "MESOS_MASTER",
              "MESOS_ADVERTISE_IP"}  # fmt: skip
    port = free_port()
    master_url = f"http://127.0.0.1:{port}"
    processes: list[subprocess.Popen] = []

    def spawn(name: str, argv: list[str], env: dict[str, str]) -> None:
        log = (tmp_path / f"{name}.log").open("ab")
        processes.append(subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=tmp_path,
        ))  # fmt: skip
        log.close()

    def agent(name: str, ip: str, credential: bool) -> int:
        agent_port = free_port(ip)
        env = env_of("agent-t1-a", placed | ({"MESOS_CREDENTIAL"} if not credential else set()))
        spawn(name, [
            str(home / "bin" / "mesos-agent"), f"--master=127.0.0.1:{port}", f"--ip={ip}",
            f"--hostname={ip}", f"--port={agent_port}", f"--work_dir={tmp_path / name}",
            f"--runtime_dir={tmp_path / (name + '-run')}", f"--launcher_dir={home / 'bin'}",
            "--no-systemd_enable_support", "--no-switch_user",
        ], env)  # fmt: skip
        return agent_port

    agent_secret = json.loads((moved["/run/mesos-agent"] / "credential.json").read_text())
    agent_auth = (agent_secret["principal"], agent_secret["secret"])
    broker_secret = (moved["/run/fairbroker-mesos"] / "secret").read_text().strip()
    try:
        spawn("master", [
            str(home / "bin" / "mesos-master"), "--ip=127.0.0.1", "--hostname=127.0.0.1",
            f"--port={port}", f"--work_dir={tmp_path / 'master'}",
        ], env_of("mesos-master", placed))  # fmt: skip

        def healthy() -> bool:
            try:
                return requests.get(f"{master_url}/health", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(healthy, 60, "the authenticating master's /health (no credentials)")
        assert requests.get(f"{master_url}/master/state", timeout=5).status_code == 401
        state = requests.get(f"{master_url}/master/state", timeout=5, auth=agent_auth)
        assert state.status_code == 200 and state.json()["flags"]["authenticate_agents"] == "true"
        assert requests.get(
            f"{master_url}/master/state", timeout=5, auth=(agent_auth[0], "wrong")
        ).status_code == 401  # fmt: skip

        good_port = agent("agent-good", "127.0.1.1", credential=True)
        agent("agent-bare", "127.0.1.2", credential=False)

        def hostnames() -> set[str]:
            answer = requests.get(f"{master_url}/master/slaves", timeout=5, auth=agent_auth)
            return {a["hostname"] for a in answer.json()["slaves"] if a["active"]}

        wait_for(lambda: "127.0.1.1" in hostnames(), 60, "the agent with the credential")
        # the other tried meanwhile, and keeps being refused
        master_log = tmp_path / "master.log"
        refused = re.compile(r"(?i)refusing registration of agent.*127\.0\.1\.2.*not authenticated")
        wait_for(
            lambda: refused.search(master_log.read_text(errors="replace")), 90,
            "the master to refuse the agent without a credential",
            context=lambda: master_log.read_text(errors="replace")[-3000:],
        )  # fmt: skip
        assert hostnames() == {"127.0.1.1"}

        agent_url = f"http://127.0.1.1:{good_port}"
        assert requests.get(f"{agent_url}/health", timeout=5).status_code == 200
        assert requests.get(f"{agent_url}/state", timeout=5).status_code == 401
        assert requests.get(f"{agent_url}/state", timeout=5, auth=agent_auth).status_code == 200

        # the v1 scheduler API, as the broker subscribes (HTTP basic, principal in FrameworkInfo)
        principal = services["broker"]["environment"]["FAIRBROKER_PRINCIPAL"]
        subscribe = {"type": "SUBSCRIBE", "subscribe": {"framework_info": {
            "user": "spark", "name": "auth-check", "principal": principal, "roles": ["spark"],
            "capabilities": [{"type": "MULTI_ROLE"}],
        }}}  # fmt: skip

        def subscribe_as(auth: tuple[str, str] | None) -> int:
            with requests.post(f"{master_url}/api/v1/scheduler", json=subscribe, auth=auth,
                               stream=True, timeout=10) as answer:  # fmt: skip
                return answer.status_code

        assert subscribe_as(None) == 401
        assert subscribe_as((principal, "wrong")) == 401
        assert subscribe_as((principal, broker_secret)) == 200

        # `fairbroker serve` configured by the broker service's own environment subscribes
        # as its principal, and the master knows the framework by it
        env = env_of("broker", set())  # (MESOS_* only: none)
        for key, value in services["broker"]["environment"].items():
            env[key] = str(value)
            for directory, local in moved.items():
                if str(value).startswith(directory + "/"):
                    env[key] = str(local / str(value).removeprefix(directory + "/"))
        http_port = free_port()
        env.update({
            "FAIRBROKER_MASTER": f"127.0.0.1:{port}", "FAIRBROKER_HOST": "127.0.0.1",
            "FAIRBROKER_PORT": str(http_port), "FAIRBROKER_GRPC_PORT": str(free_port()),
            "FAIRBROKER_METRICS_PORT": str(free_port()),
            "FAIRBROKER_STATE_DIR": str(tmp_path / "broker-state"),
        })  # fmt: skip
        # the compose ZooKeeper is not here: one broker, not elected (tests/test_ha.py runs
        # the election on a real ZooKeeper); what this checks is its Mesos authentication
        assert env.pop("FAIRBROKER_HA") == "zk://zookeeper:2181/fairbroker"
        spawn("broker", [sys.executable, "-c", "from allocator.cli import main; main()",
                         "serve"], env)  # fmt: skip

        # the broker serves TLS with the certificate the secrets service drew
        ca = env["FAIRBROKER_TLS_CA"]

        def subscribed() -> bool:
            try:
                answer = requests.get(
                    f"https://127.0.0.1:{http_port}/healthz", timeout=2, verify=ca
                )
            except requests.RequestException:
                return False
            return answer.status_code == 200

        wait_for(subscribed, 60, "the broker to subscribe with its principal")
        frameworks = requests.get(
            f"{master_url}/master/frameworks", timeout=5, auth=agent_auth
        ).json()["frameworks"]  # fmt: skip
        (ours,) = [f for f in frameworks if f["name"] == "fairbroker" and f["active"]]
        assert ours["principal"] == principal

        # the quota job's own command, pointed at this master and the secret's directory
        command = " ".join(services["mesos-setup"]["command"]).replace("$$", "$")
        command = command.replace("http://mesos-master:5050", master_url).replace(
            "/run/fairbroker-mesos", str(moved["/run/fairbroker-mesos"])
        )  # fmt: skip
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        quota = requests.post(f"{master_url}/api/v1", json={"type": "GET_QUOTA"}, timeout=5,
                              auth=(principal, broker_secret)).json()  # fmt: skip
        roles = quota["get_quota"]["status"]["infos"]
        assert [r["role"] for r in roles] == [services["broker"]["environment"]["FAIRBROKER_ROLES"]]
    finally:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(15)
