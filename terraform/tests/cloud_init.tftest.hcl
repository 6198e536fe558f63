# `terraform test`: the rendered cloud-init of every role (see the run block below).
mock_provider "aws" {
  mock_resource "aws_cloudwatch_log_group" {
    defaults = { arn = "arn:aws:logs:us-east-1:123456789012:log-group:/fairbroker/vpc-flow" }
  }
  mock_resource "aws_iam_role" {
    defaults = { arn = "arn:aws:iam::123456789012:role/fairbroker" }
  }
  mock_resource "aws_kms_key" {
    defaults = { arn = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab" }
  }
  mock_data "aws_iam_policy_document" {
    defaults = { json = "{}" }
  }
  mock_data "aws_availability_zones" {
    defaults = { names = ["us-east-1a"] }
  }
}

variables {
  admin_cidrs          = ["203.0.113.0/24"]
  tenant_cidrs         = ["198.51.100.0/24"]
  mesos_tarball_url    = "https://artifacts.example/mesos-1.11.0.tar.gz"
  mesos_tarball_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
  fairbroker_wheel_url = "https://artifacts.example/fairbroker-0.1.0-py3-none-any.whl"
}


# The cloud-init each instance boots with, decoded as YAML: cgroup v1 on the agents, Mesos
# authentication everywhere with secrets drawn at apply, Grafana's password drawn on the host.
run "cloud_init" {
  command = apply

  # agents: the kernel parameter, update-grub, the agent enabled (not started) and one reboot
  assert {
    condition = [
      for f in yamldecode(local.user_data_agent["t1-0"]).write_files : trimspace(f.content)
      if f.path == "/etc/default/grub.d/90-mesos-cgroup-v1.cfg"
    ] == ["GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX systemd.unified_cgroup_hierarchy=0\""]
    error_message = "the agents do not set systemd.unified_cgroup_hierarchy=0 on the kernel command line"
  }
  assert {
    condition = (
      index(yamldecode(local.user_data_agent["t1-0"]).runcmd, "update-grub") < index(yamldecode(local.user_data_agent["t1-0"]).runcmd, "systemctl enable agent-firewall mesos-agent")
      && !strcontains(local.user_data_agent["t1-0"], "--now mesos-agent")
      && yamldecode(local.user_data_agent["t1-0"]).power_state.mode == "reboot"
    )
    error_message = "the agents must update grub, enable mesos-agent without starting it, and reboot"
  }
  assert {
    condition = alltrue([
      for flag in [
        "ExecStartPre=/bin/sh -c 'test -d /sys/fs/cgroup/memory && test -d /sys/fs/cgroup/cpu ||",
        "--isolation=cgroups/cpu,cgroups/mem ", "--switch_user ", "--credential=/etc/mesos/credential.json ",
        "--authenticate_http_readonly ", "--authenticate_http_readwrite ", "--http_credentials=/etc/mesos/http-credentials.json ",
        "Requires=agent-firewall.service",
      ] : strcontains([for f in yamldecode(local.user_data_agent["t3-1"]).write_files : f.content if f.path == "/etc/systemd/system/mesos-agent.service"][0], flag)
    ])
    error_message = "the agent's unit lacks the cgroup v1 check, the isolators or its authentication flags"
  }

  # masters: every authentication flag, and credentials for exactly the agents and the broker
  assert {
    condition = alltrue([
      for flag in [
        "--credentials=/etc/mesos/credentials.json", "--authenticate_agents", "--authenticate_frameworks",
        "--authenticate_http_frameworks", "--http_framework_authenticators=basic",
        "--authenticate_http_readonly", "--authenticate_http_readwrite",
      ] : strcontains([for f in yamldecode(local.user_data_master[0]).write_files : f.content if f.path == "/etc/systemd/system/mesos-master.service"][0], flag)
    ])
    error_message = "the master does not require authentication of agents, frameworks and HTTP callers"
  }
  assert {
    condition = jsondecode([for f in yamldecode(local.user_data_master[0]).write_files : f.content if f.path == "/etc/mesos/credentials.json"][0]).credentials == [
      jsondecode([for f in yamldecode(local.user_data_agent["t2-0"]).write_files : f.content if f.path == "/etc/mesos/credential.json"][0]),
      { principal = "fairbroker", secret = trimspace([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/fairbroker/mesos-secret"][0]) },
    ]
    error_message = "the masters' credentials are not the agents' credential and the broker's secret"
  }
  assert {
    condition = (
      can(regex("^[0-9a-f]{64}$", terraform_data.mesos_secret["agent"].output))
      && can(regex("^[0-9a-f]{64}$", terraform_data.mesos_secret["broker"].output))
      && terraform_data.mesos_secret["agent"].output != terraform_data.mesos_secret["broker"].output
    )
    error_message = "the Mesos secrets are not two different 64-hex-digit strings"
  }

  # the broker: its framework authenticates as principal fairbroker with the secret file
  assert {
    condition = (
      yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/fairbroker/fairbroker.yaml"][0]).principal == "fairbroker"
      && yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/fairbroker/fairbroker.yaml"][0]).secret_file == "/etc/fairbroker/mesos-secret"
      && [for f in yamldecode(local.user_data_broker).write_files : f.permissions if f.path == "/etc/fairbroker/mesos-secret"] == ["0600"]
    )
    error_message = "the broker does not authenticate to Mesos with a private secret file"
  }
  # Grafana: a password drawn on the host before its first start, none in the user data
  assert {
    condition = (
      contains(yamldecode(local.user_data_broker).runcmd, "sh -c 'umask 077; mkdir -p /etc/grafana; test -s /etc/grafana/admin-password || head -c 24 /dev/urandom | base64 | tr -d \"+/=\" > /etc/grafana/admin-password'")
      && contains(yamldecode(local.user_data_broker).runcmd, "echo 'GF_SECURITY_ADMIN_PASSWORD__FILE=/etc/grafana/admin-password' >> /etc/default/grafana-server")
      && !strcontains(local.user_data_broker, "GF_SECURITY_ADMIN_PASSWORD=")
      && !strcontains(local.user_data_broker, "admin_password")
    )
    error_message = "Grafana's admin password is not drawn on the host"
  }
  # Prometheus sends its alerts to the Alertmanager beside it, which has a route
  assert {
    condition = (
      yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/prometheus/prometheus.yml"][0]).alerting.alertmanagers[0].static_configs[0].targets == ["127.0.0.1:9093"]
      && yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/prometheus/alertmanager.yml"][0]).route.routes[0].receiver == "page"
    )
    error_message = "Prometheus is not wired to an Alertmanager with a route"
  }
}

# A second apply keeps the secrets drawn by the first (else every instance's user data, and
# so every instance, would change at each apply).
run "the_secrets_are_kept_on_the_next_apply" {
  command = apply

  assert {
    condition     = sha256(local.mesos_credentials) == run.cloud_init.mesos_credentials_sha256
    error_message = "the Mesos secrets were drawn again on the second apply"
  }
}
