# Admin ports are open to var.admin_cidrs only, tenant ports to var.tenant_cidrs (default: the
# VPC); nothing but egress reaches 0.0.0.0/0. Cluster members talk to each other through the
# `cluster` group below, which every instance has. Tenant networks get two narrower groups: the
# broker's tenant API on the broker host only (`tenant_broker`), and Spark's ports on the agents
# only (`tenant_agent`), in ranges that leave out every admin port.
locals {
  tenant_cidrs = length(var.tenant_cidrs) > 0 ? var.tenant_cidrs : [var.vpc_cidr]
  admin_ports = {
    ssh        = { from = 22, to = 22, description = "SSH" }
    master     = { from = 5050, to = 5050, description = "Mesos master UI and API" }
    agent      = { from = 5051, to = 5051, description = "Mesos agent API and sandboxes" }
    zookeeper  = { from = 2181, to = 2181, description = "ZooKeeper client port" }
    broker     = { from = 7080, to = 7082, description = "fairbroker tenant API (HTTP, gRPC) and metrics" }
    prometheus = { from = 9090, to = 9090, description = "Prometheus" }
    grafana    = { from = 3000, to = 3000, description = "Grafana" }
  }
  # Within the cluster: Mesos, ZooKeeper peers, the broker, and Spark's driver, executor and
  # block manager ports (random unless a job fixes them, so the unprivileged range).
  cluster_ports = {
    master    = { from = 5050, to = 5051, description = "Mesos master and agents" }
    zookeeper = { from = 2181, to = 2181, description = "ZooKeeper clients" }
    zk_quorum = { from = 2888, to = 2888, description = "ZooKeeper quorum" }
    zk_elect  = { from = 3888, to = 3888, description = "ZooKeeper leader election" }
    broker    = { from = 7080, to = 7082, description = "fairbroker API and metrics" }
    spark     = { from = 1024, to = 65535, description = "Spark driver, executors and block managers" }
  }
  # Spark's executors and block managers on the agents, for drivers in the tenant networks: the
  # unprivileged range minus every admin port above (22 is below it). Keep in step with
  # admin_ports; tests/test_deploy_terraform.py checks that no admin port is covered and that
  # nothing else is left out.
  tenant_spark_ports = {
    low        = { from = 1024, to = 2180 }
    below_3000 = { from = 2182, to = 2999 }
    below_5050 = { from = 3001, to = 5049 }
    below_7080 = { from = 5052, to = 7079 }
    below_9090 = { from = 7083, to = 9089 }
    above_9090 = { from = 9091, to = 65535 }
  }
}

resource "aws_security_group" "cluster" {
  name        = "${var.name}-cluster"
  description = "fairbroker cluster members"
  vpc_id      = aws_vpc.cluster.id
  tags        = { Name = "${var.name}-cluster" }
}

resource "aws_vpc_security_group_ingress_rule" "cluster" {
  #checkov:skip=CKV_AWS_25:the source is the cluster's own security group, never 0.0.0.0/0; Spark's range includes 3389 only between members
  for_each                     = local.cluster_ports
  security_group_id            = aws_security_group.cluster.id
  referenced_security_group_id = aws_security_group.cluster.id
  ip_protocol                  = "tcp"
  from_port                    = each.value.from
  to_port                      = each.value.to
  description                  = "${each.value.description} (cluster members)"
}

resource "aws_vpc_security_group_ingress_rule" "admin" {
  for_each = {
    for pair in setproduct(keys(local.admin_ports), var.admin_cidrs) :
    "${pair[0]}-${pair[1]}" => { port = local.admin_ports[pair[0]], cidr = pair[1] }
  }
  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = each.value.cidr
  ip_protocol       = "tcp"
  from_port         = each.value.port.from
  to_port           = each.value.port.to
  description       = "${each.value.port.description} (admin)"
}

# The tenant API (HTTP 7080, gRPC 7081; a token is required, see templates/broker.yaml.tftpl)
# on the broker host only. Metrics (7082) stay admin-only.
resource "aws_security_group" "tenant_broker" {
  name        = "${var.name}-tenant-broker"
  description = "fairbroker tenant API for the tenant networks (broker host only)"
  vpc_id      = aws_vpc.cluster.id
  tags        = { Name = "${var.name}-tenant-broker" }
}

resource "aws_vpc_security_group_ingress_rule" "tenant_api" {
  for_each          = toset(local.tenant_cidrs)
  security_group_id = aws_security_group.tenant_broker.id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 7080
  to_port           = 7081
  description       = "fairbroker tenant API (Spark drivers)"
}

# The driver connects to its executors' block managers on the agents; nothing in the tenant
# networks needs the masters or the broker host beyond the API above.
resource "aws_security_group" "tenant_agent" {
  name        = "${var.name}-tenant-agent"
  description = "Spark executors on the agents for drivers in the tenant networks"
  vpc_id      = aws_vpc.cluster.id
  tags        = { Name = "${var.name}-tenant-agent" }
}

resource "aws_vpc_security_group_ingress_rule" "tenant_spark" {
  for_each = {
    for pair in setproduct(keys(local.tenant_spark_ports), local.tenant_cidrs) :
    "${pair[0]}-${pair[1]}" => { ports = local.tenant_spark_ports[pair[0]], cidr = pair[1] }
  }
  security_group_id = aws_security_group.tenant_agent.id
  cidr_ipv4         = each.value.cidr
  ip_protocol       = "tcp"
  from_port         = each.value.ports.from
  to_port           = each.value.ports.to
  description       = "Spark executors and block managers for drivers in the tenant networks"
}

resource "aws_vpc_security_group_egress_rule" "all" {
  #checkov:skip=CKV_AWS_382:cloud-init installs Java, Spark, Mesos and the wheel from the Internet; put an egress proxy in front to narrow this
  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "Package and artifact downloads, AWS APIs"
}
