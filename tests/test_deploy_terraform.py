"""terraform/: `terraform test` (terraform/tests/*.tftest.hcl: the security groups' rules, the
variables' validations and the rendered cloud-init, with a mocked AWS provider), `terraform fmt
-check`, checkov with no failed check (each skip justified inline), the variables' validation
blocks on their own, and the structure read with python-hcl2.

The AWS provider cannot be downloaded here: `terraform test` initialises the module from a
local provider mirror (TF_PLUGIN_DIR, default /opt/tf-plugins, as on this machine image) and
skips, saying so, where there is none."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
import yaml

from allocator.cli.serve_config import load_serve_config

REPO = Path(__file__).resolve().parents[1]
TF = REPO / "terraform"
DEPLOY_BIN = REPO / ".venv-deploy" / "bin"
PLUGIN_DIR = Path(os.environ.get("TF_PLUGIN_DIR", "/opt/tf-plugins"))
CONTROL_PORTS = {22, 2181, 2888, 3000, 3888, 5050, 5051, 7080, 7081, 7082, 9090, 9093}
GOOD = {
    "admin_cidrs": '["203.0.113.0/24"]',
    "mesos_tarball_url": "https://artifacts.example/mesos-1.11.0.tar.gz",
    "mesos_tarball_sha256": "0" * 64,
    "fairbroker_wheel_url": "https://artifacts.example/fairbroker-0.1.0-py3-none-any.whl",
}


def _clean(value):
    """python-hcl2 8 keeps HCL's quotes and block markers; plain values without them."""
    if isinstance(value, dict):
        skip = ("__comments__", "__is_block__")
        return {_clean(k): _clean(v) for k, v in value.items() if k not in skip}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def load(name: str) -> dict:
    with open(TF / name) as handle:
        return _clean(hcl2.load(handle))


def blocks(data: dict, kind: str) -> dict:
    """{name: body} of the variable/output blocks, or {(type, name): body} of resources."""
    out = {}
    for entry in data.get(kind, []):
        for name, body in entry.items():
            if kind in ("resource", "data"):
                for rname, rbody in body.items():
                    out[(name, rname)] = rbody
            else:
                out[name] = body
    return out


def everything(kind: str) -> dict:
    out = {}
    for path in sorted(TF.glob("*.tf")):
        out.update(blocks(load(path.name), kind))
    return out


def terraform() -> str:
    found = shutil.which("terraform")
    if found is None:
        pytest.skip("terraform is not installed (not on the package indexes; optional here)")
    return found


def test_terraform_fmt_check() -> None:
    done = subprocess.run(
        [terraform(), "fmt", "-check", "-recursive", str(TF)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, f"not formatted: {done.stdout}"


def test_terraform_test_passes(tmp_path: Path) -> None:
    """terraform/tests/*.tftest.hcl with a mocked AWS provider: no credentials, nothing made.
    The module is copied (its `../deploy` and `../scripts` linked) so that `init` leaves
    nothing in the checkout."""
    binary = terraform()
    if not (PLUGIN_DIR / "registry.terraform.io" / "hashicorp" / "aws").is_dir():
        pytest.skip(f"no local AWS provider mirror at {PLUGIN_DIR} (set TF_PLUGIN_DIR); "
                    "terraform test needs the provider's schema even when mocked")  # fmt: skip
    module = tmp_path / "terraform"
    shutil.copytree(TF, module, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    for name in ("deploy", "scripts"):
        (tmp_path / name).symlink_to(REPO / name)
    run = {"cwd": module, "capture_output": True, "text": True}
    done = subprocess.run(
        [binary, "init", "-input=false", "-no-color", f"-plugin-dir={PLUGIN_DIR}"],
        **run, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([binary, "test", "-no-color"], **run, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    # every run block ran and passed: none was skipped or dropped
    runs = sum(
        len(re.findall(r'^run "', path.read_text(), re.M))
        for path in module.glob("tests/*.tftest.hcl")
    )  # fmt: skip
    assert runs >= 25
    assert re.search(rf"^Success! {runs} passed, 0 failed\.$", done.stdout, re.M), done.stdout


def test_checkov_finds_nothing_and_every_skip_is_justified() -> None:
    checkov = DEPLOY_BIN / "checkov"
    if not checkov.exists():
        if os.environ.get("CI"):  # `make test` installs it: missing in CI is a failure
            pytest.fail("checkov is not installed (make deploy-tools)")
        pytest.skip("checkov is not installed (make deploy-tools)")
    done = subprocess.run(
        [str(checkov), "-d", str(TF), "--framework", "terraform", "--skip-download", "-o", "json",
         "--quiet"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    report = json.loads(done.stdout)
    summary = report["summary"]
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert summary["failed"] == 0 and not failed, failed
    assert summary["passed"] > 100 and done.returncode == 0
    for path in TF.glob("*.tf"):
        for skip in re.findall(r"#checkov:skip=([^\n]*)", path.read_text()):
            check, _, reason = skip.partition(":")
            assert re.fullmatch(r"CKV2?_AWS_\d+", check) and len(reason) > 30, (path.name, skip)


def _plan_variables(tmp_path: Path, **overrides: str) -> subprocess.CompletedProcess[str]:
    """`terraform plan` of the variables alone: their validation blocks, evaluated by
    terraform itself (no provider needed)."""
    work = tmp_path / "vars"
    work.mkdir(exist_ok=True)
    shutil.copy(TF / "variables.tf", work / "variables.tf")
    run = {"cwd": work, "capture_output": True, "text": True, "timeout": 60}
    subprocess.run([terraform(), "init", "-input=false", "-no-color"], **run, check=True)
    args = []
    for key, value in {**GOOD, **overrides}.items():
        args += ["-var", f"{key}={value}"]
    return subprocess.run(
        [terraform(), "plan", "-input=false", "-lock=false", "-no-color", *args], **run
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("admin_cidrs", '["0.0.0.0/0"]'),
        ("admin_cidrs", '["0.0.0.0/00"]'),
        ("admin_cidrs", '["0.0.0.0/1", "128.0.0.0/1"]'),
        ("admin_cidrs", '["10.0.0.0/16", "::/0"]'),
        ("admin_cidrs", '["10.0.0.0/8"]'),
        ("admin_cidrs", "[]"),
        ("admin_cidrs", '["10.0.0.300/8"]'),
        ("tenant_cidrs", '["0.0.0.0/0"]'),
        ("tenant_cidrs", '["0.0.0.0/01", "128.0.0.0/1"]'),
        ("min_cidr_prefix", "4"),
        ("vpc_cidr", "10.42.0.0/28"),
        ("master_count", "2"),
        ("master_instance_type", "huge"),
        ("agent_types", '{t1 = {count = -1, instance_type = "m5.large", cpus = 4, mem_mb = 4096}}'),
        ("agent_types", '{t1 = {count = 1, instance_type = "m5", cpus = 4, mem_mb = 4096}}'),
        ("agent_types", '{t1 = {count = 1, instance_type = "m5.large", cpus = 0, mem_mb = 4096}}'),
        ("mesos_tarball_url", "http://insecure.example/mesos.tgz"),
        ("broker_scheduler", "fifo"),
        ("broker_role", "*"),
    ],
)
def test_variable_validations_refuse_bad_values(tmp_path: Path, variable: str, value: str) -> None:
    done = _plan_variables(tmp_path, **{variable: value})
    assert done.returncode != 0
    assert f'variable "{variable}"' in done.stderr and f"{variable}:" in done.stderr, done.stderr


def test_variable_validations_accept_the_defaults_and_a_three_master_cluster(
    tmp_path: Path,
) -> None:
    assert _plan_variables(tmp_path).returncode == 0
    done = _plan_variables(
        tmp_path, master_count="3", admin_cidrs='["203.0.113.7/32", "198.51.100.0/24"]'
    )
    assert done.returncode == 0, done.stderr


def test_defaults_reproduce_paper_002s_six_agents() -> None:
    variables = everything("variable")
    agent_types = variables["agent_types"]["default"]
    found = sorted((t["count"], t["cpus"], t["mem_mb"]) for t in agent_types.values())
    # two each of 4 CPU/14 GB, 8 CPU/8 GB, 6 CPU/11 GB
    assert found == [(2, 4, 14336), (2, 6, 11264), (2, 8, 8192)]
    assert "default" not in variables["admin_cidrs"]  # an operator must say who administers
    for name in ("admin_cidrs", "tenant_cidrs", "min_cidr_prefix", "vpc_cidr", "subnet_cidr",
                 "master_count",
                 "master_instance_type", "broker_instance_type", "agent_types"):  # fmt: skip
        assert variables[name].get("validation"), f"{name} has no validation block"


def test_every_ingress_rule_is_in_the_two_resources_terraform_test_checks() -> None:
    """terraform/tests/security_groups.tftest.hcl asserts what each role reaches through the
    `member` and `network` rules; a rule anywhere else would escape it."""
    resources = everything("resource")
    ingress = {k for k in resources if k[0] == "aws_vpc_security_group_ingress_rule"}
    assert ingress == {
        ("aws_vpc_security_group_ingress_rule", "member"),
        ("aws_vpc_security_group_ingress_rule", "network"),
    }
    assert not any(k[0] in ("aws_security_group_rule", "aws_vpc_security_group_egress_rule")
                   and k[1] != "all" for k in resources)  # fmt: skip
    groups = {k[1] for k in resources if k[0] == "aws_security_group"}
    assert groups == {"master", "agent", "broker"}
    # outside the validations, 0.0.0.0/0 appears only as egress and as the Internet route
    for path in set(TF.glob("*.tf")) - {TF / "variables.tf"}:
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            if "0.0.0.0/0" in line and not line.lstrip().startswith("#"):
                assert "cidr_ipv4" in line or "cidr_block" in line, (path.name, line_no)
    assert resources[("aws_vpc_security_group_egress_rule", "all")]["cidr_ipv4"] == "0.0.0.0/0"


def test_spark_port_ranges_are_the_unprivileged_range_minus_every_control_port() -> None:
    """The agents' Spark ranges (open between agents and to tenant networks), computed here from
    the locals: every unprivileged port but the 11 a service of the module listens on."""
    local = load("security.tf")["locals"][0]
    covered: list[int] = []
    for spec in local["spark_ports"].values():
        covered.extend(range(spec["from"], spec["to"] + 1))
    assert len(covered) == len(set(covered))  # no overlap
    assert set(covered) == set(range(1024, 65536)) - CONTROL_PORTS
    admin = {
        p for v in local["admin_ports"].values() for p in range(v["from"], v["to"] + 1)
    }  # fmt: skip
    assert admin == CONTROL_PORTS - {2888, 3888}  # ZooKeeper's peer ports: masters only


def _render(template: str, **values: str) -> str:
    """A cloud-init template with its ${...} filled in (the named values, else a placeholder)
    and its %{...} directive lines dropped, so a loop's body appears once. terraform test
    renders them for real (terraform/tests/cloud_init.tftest.hcl)."""
    lines = [line for line in template.splitlines(True) if not line.lstrip().startswith("%{")]
    return re.sub(r"\$\{([^}]*)\}", lambda m: values.get(m.group(1), "placeholder"), "".join(lines))


def test_the_broker_host_requires_a_token(tmp_path: Path) -> None:
    """The broker listens on 0.0.0.0: its configuration names a token file, and cloud-init
    makes that file (random, readable by root and the fairbroker group only) before the
    service starts."""
    text = _render(
        (TF / "templates" / "broker.yaml.tftpl").read_text(),
        scheduler="rpsdsf", broker_ip="10.42.1.20", zk_url="zk://10.42.1.10:2181/mesos",
        role="spark", principal="fairbroker", ha_url="zk://10.42.1.10:2181/fairbroker",
        metrics_targets='["10.42.1.20:7082", "10.42.1.21:7082"]',
    )  # fmt: skip
    cloud = yaml.safe_load(text)
    (config_file,) = [
        f for f in cloud["write_files"] if f["path"] == "/etc/fairbroker/fairbroker.yaml"
    ]
    (tmp_path / "fairbroker.yaml").write_text(config_file["content"])
    config, _ = load_serve_config({}, tmp_path / "fairbroker.yaml", {})
    assert config.host == "0.0.0.0" and config.token is None
    assert config.ha == "zk://10.42.1.10:2181/fairbroker"  # one of two brokers
    files = {f["path"]: f for f in cloud["write_files"]}
    prometheus = files["/etc/prometheus/prometheus.yml"]
    scrape = yaml.safe_load(prometheus["content"])["scrape_configs"][0]["static_configs"][0]
    assert scrape["targets"] == ["10.42.1.20:7082", "10.42.1.21:7082"]
    assert config.token_file == Path("/etc/fairbroker/token")
    # the framework authenticates to the masters (terraform test checks the secret's value)
    assert config.principal == "fairbroker"
    assert config.secret_file == Path("/etc/fairbroker/mesos-secret")
    commands = [c if isinstance(c, str) else " ".join(c) for c in cloud["runcmd"]]
    made = next(i for i, c in enumerate(commands) if "> /etc/fairbroker/token" in c)
    assert "/dev/urandom" in commands[made] and "umask 077" in commands[made]
    assert "test -s /etc/fairbroker/token ||" in commands[made]  # a rerun keeps the token
    assert commands.index("chmod 0640 /etc/fairbroker/token /etc/fairbroker/mesos-secret") > made
    assert commands.index("systemctl enable --now fairbroker") > made


def test_instances_outputs_and_cloud_init() -> None:
    resources = everything("resource")
    for name in ("master", "agent", "broker"):
        instance = resources[("aws_instance", name)]
        assert instance["metadata_options"][0]["http_tokens"] == "required", name
        assert instance["root_block_device"][0]["encrypted"] is True, name
        # gzipped: the broker's user data with the dashboard is above AWS's 16 KiB otherwise
        assert instance["user_data_base64"].startswith(f"${{base64gzip(local.user_data_{name}")
        assert f"templates/{name}.yaml.tftpl" in (TF / "userdata.tf").read_text(), name
    assert resources[("aws_instance", "master")]["count"] == "${var.master_count}"
    standby = resources[("aws_instance", "broker_standby")]
    assert standby["count"] == "${var.broker_count - 1}"
    for key in ("metadata_options", "root_block_device", "vpc_security_group_ids", "ami"):
        assert standby[key] == resources[("aws_instance", "broker")][key], key
    assert standby["user_data_base64"].startswith("${base64gzip(local.user_data_broker_standby")
    outputs = everything("output")
    assert {"mesos_master_url", "broker_api", "prometheus_url", "grafana_url"} <= set(outputs)
    assert "sparkbroker://" in outputs["broker_api"]["value"]
    agent = (TF / "templates" / "agent.yaml.tftpl").read_text()
    assert '--resources="${resources}"' in agent and '--attributes="${attributes}"' in agent
    assert "--master=${master} " in agent  # no ZooKeeper for one master (userdata.tf)
    assert "openjdk-17" in agent and "/opt/spark" in agent and "python3" in agent
    broker = (TF / "templates" / "broker.yaml.tftpl").read_text()
    assert "${indent(6, systemd_unit)}" in broker and "systemctl enable --now fairbroker" in broker
    assert "UPDATE_QUOTA" in broker and "install_pymesos.py" in broker
    assert "--netrc-file /root/.mesos.netrc" in broker  # the operator API needs credentials
    userdata = (TF / "userdata.tf").read_text()
    assert "deploy/systemd/fairbroker.service" in userdata  # the same unit as deploy/
    for template in (TF / "templates").glob("*.tftpl"):
        assert "#!/bin/sh" in template.read_text() or template.read_text().startswith(
            "#cloud-config"
        ), template.name


def test_the_masters_and_agents_authenticate_as_the_compose_cluster_does() -> None:
    """The Mesos authentication flags of the cloud-init units are those of docker/compose.yaml,
    which tests/test_deploy_docker.py runs on a real Mesos 1.11.0 master and agents."""
    compose = yaml.safe_load((REPO / "docker" / "compose.yaml").read_text())

    def flags(template: str, unit: str) -> set[str]:
        text = (TF / "templates" / template).read_text()
        start = text.index(f"path: /etc/systemd/system/{unit}")
        line = next(x for x in text[start:].splitlines() if "ExecStart=" in x and "mesos-" in x)
        return {f.split("=")[0] for f in re.findall(r"--(\w*auth\w*(?:=\w+)?)", line)}

    def env(service: dict) -> set[str]:
        return {
            k.removeprefix("MESOS_").lower() for k, v in service["environment"].items()
            if "AUTH" in k and v != "false"
        }  # fmt: skip

    master = compose["services"]["mesos-master"]
    assert flags("master.yaml.tftpl", "mesos-master.service") == env(master) == {
        "authenticate_agents", "authenticate_frameworks", "authenticate_http_frameworks",
        "http_framework_authenticators", "authenticate_http_readonly",
        "authenticate_http_readwrite",
    }  # fmt: skip
    agent_env = compose["x-agent-env"]
    assert flags("agent.yaml.tftpl", "mesos-agent.service") == env({"environment": agent_env})
