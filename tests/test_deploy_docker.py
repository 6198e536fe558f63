"""docker/: the compose file as Debian's docker-compose resolves it, hadolint on every
Dockerfile, and the structure the deployment relies on (paper 002's six agents, healthchecks,
pinned images, no privileged container, the broker's configuration valid for `serve`).

No container engine runs here: images are not built, the tools that need none are run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest
import yaml

from allocator.cli.serve_config import load_serve_config

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DEPLOY_BIN = REPO / ".venv-deploy" / "bin"  # `make deploy-tools`
DOCKERFILES = sorted(DOCKER.rglob("Dockerfile"))
# Paper 002 Sec. V: two servers each of (4 CPU, 14 GB), (8 CPU, 8 GB), (6 CPU, 11 GB).
PAPER_AGENTS = Counter({(4, 14 * 1024, "t1"): 2, (8, 8 * 1024, "t2"): 2, (6, 11 * 1024, "t3"): 2})


def tool(name: str) -> str:
    found = shutil.which(name) or (
        str(DEPLOY_BIN / name) if (DEPLOY_BIN / name).exists() else None
    )
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


def test_agents_are_paper_002s_six_servers(resolved: dict) -> None:
    agents = {n: s for n, s in resolved["services"].items() if n.startswith("agent-")}
    found: Counter = Counter()
    for name, service in agents.items():
        env = service["environment"]
        resources = dict(r.split(":") for r in env["MESOS_RESOURCES"].split(";"))
        attributes = dict(a.split(":") for a in env["MESOS_ATTRIBUTES"].split(";"))
        found[(float(resources["cpus"]), float(resources["mem"]), attributes["type"])] += 1
        assert env["MESOS_MASTER"].startswith("zk://zookeeper:2181/")
        assert env["MESOS_HOSTNAME"] == service["hostname"] == name
        assert service["depends_on"]["mesos-master"]["condition"] == "service_healthy"
    assert found == PAPER_AGENTS


def test_every_service_is_healthchecked_pinned_and_unprivileged(resolved: dict) -> None:
    env_file = dict(
        line.split("=", 1) for line in (DOCKER / ".env").read_text().splitlines()
        if line and not line.startswith("#")
    )  # fmt: skip
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
    assert scrape["scrape_configs"][0]["static_configs"][0]["targets"] == ["broker:7082"]


def test_the_broker_requires_a_token_made_at_first_start(resolved: dict, tmp_path: Path) -> None:
    """The broker's tenant API listens beyond loopback (0.0.0.0 in the image): it reads a token
    file that a one-shot service makes before it starts, and the batch client sends it."""
    services = resolved["services"]
    broker, maker, client = services["broker"], services["broker-token"], services["client"]
    config, _ = load_serve_config({}, None, {k: str(v) for k, v in broker["environment"].items()})
    assert config.token_file is not None and config.token is None
    runtime = (DOCKER / "broker" / "Dockerfile").read_text().split("AS runtime", 1)[1]
    assert re.search(r"^\s+FAIRBROKER_HOST=0\.0\.0\.0", runtime.split("AS client")[0], re.M)

    def volume_at(service: dict, directory: Path) -> str:
        (name,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == str(directory)]
        return name

    directory = config.token_file.parent
    volume = volume_at(broker, directory)
    assert volume == volume_at(maker, directory) == volume_at(client, directory)
    assert broker["depends_on"]["broker-token"]["condition"] == "service_completed_successfully"
    assert maker["restart"] == "no" and maker["entrypoint"] == ["python", "-c"]
    # the client's entrypoint exports the token for every fairbroker command
    script = client["entrypoint"][2].replace("$$", "$")
    assert f'FAIRBROKER_TOKEN="$(cat {config.token_file})" exec fairbroker "$@"' == script
    # the maker's program, run here on a temporary directory: a random token, kept on a rerun
    (program,) = maker["command"]
    program = program.replace(str(directory), str(tmp_path))
    if os.geteuid() != 0:  # handing the file to user 10001 needs root, as in the container
        program = program.replace("os.chown(token, 10001, 10001);", "")
    token = tmp_path / config.token_file.name
    subprocess.run([sys.executable, "-c", program], check=True, timeout=30)
    first = token.read_text()
    assert len(first.strip()) >= 40 and first.endswith("\n")
    assert token.stat().st_mode & 0o777 == 0o400
    if os.geteuid() == 0:
        assert (token.stat().st_uid, token.stat().st_gid) == (10001, 10001)
    subprocess.run([sys.executable, "-c", program], check=True, timeout=30)
    assert token.read_text() == first
    token.unlink()
    subprocess.run([sys.executable, "-c", program], check=True, timeout=30)
    assert token.read_text() != first


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
