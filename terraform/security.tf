# Admin ports are open to var.admin_cidrs only, tenant ports to var.tenant_cidrs (default: the
# VPC); nothing but egress reaches 0.0.0.0/0. Cluster members talk to each other through the
# `cluster` group below.
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

resource "aws_vpc_security_group_ingress_rule" "tenant_api" {
  for_each          = toset(local.tenant_cidrs)
  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 7080
  to_port           = 7081
  description       = "fairbroker tenant API (Spark drivers)"
}

# Executors connect back to their driver; drivers outside the cluster group need this.
resource "aws_vpc_security_group_ingress_rule" "tenant_spark" {
  for_each          = toset(local.tenant_cidrs)
  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = each.value
  ip_protocol       = "tcp"
  from_port         = 1024
  to_port           = 65535
  description       = "Spark drivers and executors in the tenant networks"
}

resource "aws_vpc_security_group_egress_rule" "all" {
  #checkov:skip=CKV_AWS_382:cloud-init installs Java, Spark, Mesos and the wheel from the Internet; put an egress proxy in front to narrow this
  security_group_id = aws_security_group.cluster.id
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "Package and artifact downloads, AWS APIs"
}
