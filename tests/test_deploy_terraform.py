"""terraform/: `terraform fmt -check`, checkov with no failed check (each skip justified
inline), the variables' validation blocks evaluated by real terraform, and the structure
(security group rules, agent types, outputs, cloud-init) read with python-hcl2.

`terraform validate` of the whole module needs the AWS provider, which cannot be downloaded
here; the variables are validated on their own (they need no provider), the rest by checkov
and the structural tests."""

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
ADMIN_PORTS = {22, 5050, 5051, 2181, 7080, 7081, 7082, 9090, 3000}
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
        ("admin_cidrs", '["10.0.0.0/8", "::/0"]'),
        ("admin_cidrs", "[]"),
        ("admin_cidrs", '["10.0.0.300/8"]'),
        ("tenant_cidrs", '["0.0.0.0/0"]'),
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
    for name in ("admin_cidrs", "tenant_cidrs", "vpc_cidr", "subnet_cidr", "master_count",
                 "master_instance_type", "broker_instance_type", "agent_types"):  # fmt: skip
        assert variables[name].get("validation"), f"{name} has no validation block"


def test_no_admin_port_is_open_to_the_internet() -> None:
    resources = everything("resource")
    security = load("security.tf")
    local = security["locals"][0]
    admin = {p for v in local["admin_ports"].values() for p in range(v["from"], v["to"] + 1)}
    assert admin >= ADMIN_PORTS
    ingress = {k: v for k, v in resources.items() if k[0] == "aws_vpc_security_group_ingress_rule"}
    assert ingress
    for key, rule in ingress.items():
        source = rule.get("cidr_ipv4") or rule.get("referenced_security_group_id")
        assert source, key
        assert "0.0.0.0/0" not in json.dumps(rule) and "::/0" not in json.dumps(rule), key
        assert source.startswith(("${each.value", "${aws_security_group.cluster")), key
        assert rule["security_group_id"] in (
            "${aws_security_group.cluster.id}", "${aws_security_group.tenant_broker.id}",
            "${aws_security_group.tenant_agent.id}",
        ), key  # fmt: skip
        assert rule.get("description"), key
    assert "var.admin_cidrs" in ingress[("aws_vpc_security_group_ingress_rule", "admin")][
        "for_each"]  # fmt: skip
    # outside the validations that refuse it, 0.0.0.0/0 appears only as egress and as the
    # route to the Internet gateway
    for path in set(TF.glob("*.tf")) - {TF / "variables.tf"}:
        for line_no, line in enumerate(path.read_text().splitlines(), 1):
            if "0.0.0.0/0" in line and not line.lstrip().startswith("#"):
                assert "cidr_ipv4" in line or "cidr_block" in line, (path.name, line_no)
    egress = resources[("aws_vpc_security_group_egress_rule", "all")]
    assert egress["cidr_ipv4"] == "0.0.0.0/0"
    assert not any(k[0] == "aws_security_group_rule" for k in resources)  # one rule style


def _rule_ports(rule: dict, local: dict) -> set[int]:
    """The ports an ingress rule opens: literal from/to, or each entry of the locals map its
    for_each iterates (`each.value.<key>.from` .. `.to`)."""
    if isinstance(rule["from_port"], int):
        return set(range(rule["from_port"], rule["to_port"] + 1))
    maps = {name: v for name, v in local.items() if isinstance(v, dict)}
    (name,) = {m for m in re.findall(r"local\.(\w+)", rule["for_each"]) if m in maps}
    return {p for v in maps[name].values() for p in range(v["from"], v["to"] + 1)}


def test_tenant_networks_reach_no_admin_port_but_the_broker_api() -> None:
    """Only admin_cidrs and the cluster's own group may reach an admin port; tenant networks get
    the tenant API (7080-7081, token required) on the broker host and Spark's ports on the
    agents, and those Spark ranges leave out exactly the admin ports."""
    resources = everything("resource")
    local = load("security.tf")["locals"][0]
    admin = {p for v in local["admin_ports"].values() for p in range(v["from"], v["to"] + 1)}
    assert admin >= ADMIN_PORTS
    tenant_reach: dict[str, set[int]] = {}
    for (kind, name), rule in resources.items():
        if kind != "aws_vpc_security_group_ingress_rule":
            continue
        ports = _rule_ports(rule, local)
        if rule.get("referenced_security_group_id") == "${aws_security_group.cluster.id}":
            continue  # cluster members
        if "var.admin_cidrs" in rule["for_each"]:
            assert "tenant" not in rule["for_each"], name
            continue
        assert "local.tenant_cidrs" in rule["for_each"], name  # the only other source
        group = rule["security_group_id"]
        tenant_reach.setdefault(group, set()).update(ports)
    assert tenant_reach == {
        "${aws_security_group.tenant_broker.id}": {7080, 7081},
        "${aws_security_group.tenant_agent.id}": set(range(1024, 65536)) - admin,
    }
    # the tenant groups are on the hosts they are meant for, and nowhere else
    groups = {
        name: set(resources[("aws_instance", name)]["vpc_security_group_ids"])
        for name in ("master", "agent", "broker")
    }
    cluster = "${aws_security_group.cluster.id}"
    assert groups == {
        "master": {cluster},
        "agent": {cluster, "${aws_security_group.tenant_agent.id}"},
        "broker": {cluster, "${aws_security_group.tenant_broker.id}"},
    }


def _render(template: str, **values: str) -> str:
    """A cloud-init template with its ${...} filled in: the named values, else a placeholder."""
    return re.sub(r"\$\{([^}]*)\}", lambda m: values.get(m.group(1), "placeholder"), template)


def test_the_broker_host_requires_a_token(tmp_path: Path) -> None:
    """The broker listens on 0.0.0.0: its configuration names a token file, and cloud-init
    makes that file (random, readable by root and the fairbroker group only) before the
    service starts."""
    text = _render(
        (TF / "templates" / "broker.yaml.tftpl").read_text(),
        scheduler="rpsdsf", broker_ip="10.42.1.20", zk_url="zk://10.42.1.10:2181/mesos",
        role="spark",
    )  # fmt: skip
    cloud = yaml.safe_load(text)
    (config_file,) = [
        f for f in cloud["write_files"] if f["path"] == "/etc/fairbroker/fairbroker.yaml"
    ]
    (tmp_path / "fairbroker.yaml").write_text(config_file["content"])
    config, _ = load_serve_config({}, tmp_path / "fairbroker.yaml", {})
    assert config.host == "0.0.0.0" and config.token is None
    assert config.token_file == Path("/etc/fairbroker/token")
    commands = [c if isinstance(c, str) else " ".join(c) for c in cloud["runcmd"]]
    made = next(i for i, c in enumerate(commands) if "> /etc/fairbroker/token" in c)
    assert "/dev/urandom" in commands[made] and "umask 077" in commands[made]
    assert "test -s /etc/fairbroker/token ||" in commands[made]  # a rerun keeps the token
    assert commands.index("chmod 0640 /etc/fairbroker/token") > made
    assert commands.index("systemctl enable --now fairbroker") > made


def test_instances_outputs_and_cloud_init() -> None:
    resources = everything("resource")
    for name in ("master", "agent", "broker"):
        instance = resources[("aws_instance", name)]
        assert instance["metadata_options"][0]["http_tokens"] == "required", name
        assert instance["root_block_device"][0]["encrypted"] is True, name
        assert f"templates/{name}.yaml.tftpl" in instance["user_data"], name
    assert resources[("aws_instance", "master")]["count"] == "${var.master_count}"
    outputs = everything("output")
    assert {"mesos_master_url", "broker_api", "prometheus_url", "grafana_url"} <= set(outputs)
    assert "sparkbroker://" in outputs["broker_api"]["value"]
    agent = (TF / "templates" / "agent.yaml.tftpl").read_text()
    assert '--resources="${resources}"' in agent and '--attributes="${attributes}"' in agent
    assert "openjdk-17" in agent and "/opt/spark" in agent and "python3" in agent
    broker = (TF / "templates" / "broker.yaml.tftpl").read_text()
    assert "${indent(6, systemd_unit)}" in broker and "systemctl enable --now fairbroker" in broker
    assert "UPDATE_QUOTA" in broker and "install_pymesos.py" in broker
    instances = (TF / "instances.tf").read_text()
    assert "deploy/systemd/fairbroker.service" in instances  # the same unit as deploy/
    for template in (TF / "templates").glob("*.tftpl"):
        assert "#!/bin/sh" in template.read_text() or template.read_text().startswith(
            "#cloud-config"
        ), template.name
