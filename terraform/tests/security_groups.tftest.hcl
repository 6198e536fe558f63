# `terraform test` with a mocked AWS provider (no credentials, nothing created): the security
# groups' rules as the module computes them, for one and for three masters. Run by
# tests/test_deploy_terraform.py in `make test`.
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

run "one_master" {
  command = apply

  # every instance carries its role's group and no other
  assert {
    condition = (
      aws_instance.master[0].vpc_security_group_ids == toset([aws_security_group.master.id])
      && alltrue([for a in values(aws_instance.agent) : a.vpc_security_group_ids == toset([aws_security_group.agent.id])])
      && aws_instance.broker.vpc_security_group_ids == toset([aws_security_group.broker.id])
    )
    error_message = "an instance is not in exactly its role's security group"
  }

  # agents (tenants' code) reach the masters on 5050 only, the broker host not at all
  assert {
    condition = toset([
      for r in values(aws_vpc_security_group_ingress_rule.member) : "${r.from_port}-${r.to_port}"
      if r.referenced_security_group_id == aws_security_group.agent.id && r.security_group_id == aws_security_group.master.id
    ]) == toset(["5050-5050"])
    error_message = "agents reach a master port other than 5050"
  }
  assert {
    condition = length([
      for r in values(aws_vpc_security_group_ingress_rule.member) : r
      if r.referenced_security_group_id == aws_security_group.agent.id && r.security_group_id == aws_security_group.broker.id
    ]) == 0
    error_message = "agents reach the broker host (its metrics, Prometheus, Alertmanager or Grafana)"
  }
  # between agents: Spark's ports, none of the control ports
  assert {
    condition = alltrue([
      for r in values(aws_vpc_security_group_ingress_rule.member) : alltrue([
        for port in [22, 2181, 2888, 3000, 3888, 5050, 5051, 7080, 7081, 7082, 9090, 9093] : port < r.from_port || port > r.to_port
      ]) if r.referenced_security_group_id == aws_security_group.agent.id && r.security_group_id == aws_security_group.agent.id
    ])
    error_message = "a rule between agents opens a control port"
  }
  # the agents' Spark ranges are the unprivileged range minus exactly the control ports
  assert {
    condition = sum([
      for r in values(aws_vpc_security_group_ingress_rule.member) : r.to_port - r.from_port + 1
      if r.referenced_security_group_id == aws_security_group.agent.id && r.security_group_id == aws_security_group.agent.id
    ]) == 65535 - 1024 + 1 - 11
    error_message = "the agents' Spark ranges leave out more or less than the 11 control ports above 1023"
  }
  # ZooKeeper (2181, 2888, 3888) only from the masters and the broker host
  assert {
    condition = alltrue([
      for r in values(aws_vpc_security_group_ingress_rule.member) : contains([aws_security_group.master.id, aws_security_group.broker.id], r.referenced_security_group_id)
      if r.security_group_id == aws_security_group.master.id && r.from_port != 5050
    ])
    error_message = "ZooKeeper is reachable from a group other than the masters' and the broker's"
  }
  # the master reaches the agents' 5051; nothing else reaches it from a group
  assert {
    condition = toset([
      for r in values(aws_vpc_security_group_ingress_rule.member) : r.referenced_security_group_id
      if r.security_group_id == aws_security_group.agent.id && r.from_port <= 5051 && r.to_port >= 5051
    ]) == toset([aws_security_group.master.id])
    error_message = "the agents' port 5051 is open to a group other than the masters'"
  }

  # networks: admin ports from admin_cidrs; from tenant_cidrs the tenant API (7080-7081) on the
  # broker host and Spark's ports on the agents; no rule for the masters from tenants
  assert {
    condition = alltrue([
      for r in values(aws_vpc_security_group_ingress_rule.network) : contains(var.admin_cidrs, r.cidr_ipv4) || contains(var.tenant_cidrs, r.cidr_ipv4)
    ]) && length([for r in values(aws_vpc_security_group_ingress_rule.network) : r if r.cidr_ipv4 == "0.0.0.0/0"]) == 0
    error_message = "an ingress rule is open to a network other than admin_cidrs and tenant_cidrs"
  }
  assert {
    condition = toset([
      for r in values(aws_vpc_security_group_ingress_rule.network) : "${r.from_port}-${r.to_port}"
      if contains(var.tenant_cidrs, r.cidr_ipv4) && r.security_group_id == aws_security_group.broker.id
    ]) == toset(["7080-7081"])
    error_message = "tenant networks reach something on the broker host beyond the tenant API"
  }
  assert {
    condition = alltrue([
      for r in values(aws_vpc_security_group_ingress_rule.network) : r.security_group_id != aws_security_group.master.id && alltrue([
        for port in [22, 2181, 2888, 3000, 3888, 5050, 5051, 7082, 9090, 9093] : port < r.from_port || port > r.to_port
      ]) if contains(var.tenant_cidrs, r.cidr_ipv4)
    ])
    error_message = "tenant networks reach a master or a control port"
  }
  assert {
    condition = toset([
      for r in values(aws_vpc_security_group_ingress_rule.network) : "${r.from_port}-${r.to_port}"
      if contains(var.admin_cidrs, r.cidr_ipv4) && r.security_group_id == aws_security_group.broker.id
    ]) == toset(["22-22", "7080-7082", "9090-9090", "9093-9093", "3000-3000"])
    error_message = "admin ports on the broker host are not SSH, the broker's three ports, Prometheus, Alertmanager and Grafana"
  }
  # AWS accepts these characters only in a rule's description
  assert {
    condition = alltrue([
      for r in concat(values(aws_vpc_security_group_ingress_rule.member), values(aws_vpc_security_group_ingress_rule.network)) :
      can(regex("^[a-zA-Z0-9. _:/()#,@\\[\\]+=&;{}!$*-]{1,255}$", r.description))
    ])
    error_message = "a rule's description has a character AWS refuses"
  }

  # one master: the agents address it directly and never reach ZooKeeper
  assert {
    condition     = local.agent_master == "10.42.1.10:5050"
    error_message = "with one master, the agents should address 10.42.1.10:5050"
  }
  assert {
    condition     = strcontains(local.user_data_agent["t1-0"], "--master=10.42.1.10:5050 ")
    error_message = "the agent's unit does not use --master=10.42.1.10:5050"
  }

  # AWS refuses user data above 16 KiB (before base64): the broker's carries the dashboard
  assert {
    condition = alltrue([
      for data in concat([aws_instance.broker.user_data_base64], aws_instance.broker_standby[*].user_data_base64, [for a in values(aws_instance.agent) : a.user_data_base64], aws_instance.master[*].user_data_base64) :
      length(data) * 3 / 4 <= 16384
    ])
    error_message = "an instance's user data is above AWS's 16 KiB"
  }
}

run "three_masters" {
  command = apply
  variables {
    master_count = 3
  }

  # with three masters an agent follows the leader through ZooKeeper: 2181 is open to the
  # agents' group, and the agents' firewall lets only root reach the three masters
  assert {
    condition = toset([
      for r in values(aws_vpc_security_group_ingress_rule.member) : "${r.from_port}-${r.to_port}"
      if r.referenced_security_group_id == aws_security_group.agent.id && r.security_group_id == aws_security_group.master.id
    ]) == toset(["5050-5050", "2181-2181"])
    error_message = "with three masters agents should reach 5050 and 2181 on the masters, nothing else"
  }
  assert {
    condition     = local.agent_master == "zk://10.42.1.10:2181,10.42.1.11:2181,10.42.1.12:2181/mesos"
    error_message = "with three masters the agents should find the leader in ZooKeeper"
  }
  assert {
    condition = strcontains(
      yamldecode(local.user_data_agent["t2-1"]).write_files[index(yamldecode(local.user_data_agent["t2-1"]).write_files[*].path, "/usr/local/sbin/agent-firewall")].content,
      "for destination in 169.254.169.254 10.42.1.10 10.42.1.11 10.42.1.12; do"
    )
    error_message = "the agents' firewall does not cover the metadata service and all three masters"
  }
  assert {
    condition     = length(aws_instance.master) == 3
    error_message = "three masters"
  }
}
