# One security group per role (master, agent, broker), and every ingress rule in one of two
# resources: `member` (from another role's group) and `network` (from admin_cidrs or
# tenant_cidrs). tests/terraform/*.tftest.hcl asserts what each role reaches from them.
#
# The agents run tenants' Spark code, so whatever an agent may reach, a tenant may reach: the
# agents get the master's port (agent authentication is on, templates/master.yaml.tftpl) and
# each other's Spark ports, nothing else; never ZooKeeper (but with three masters, see below),
# Prometheus, Grafana, Alertmanager or the broker's metrics. On the agent hosts a firewall
# also keeps every user but root (the agent itself) away from the masters and the instance
# metadata service (templates/agent.yaml.tftpl).
locals {
  tenant_cidrs = length(var.tenant_cidrs) > 0 ? var.tenant_cidrs : [var.vpc_cidr]
  groups = {
    master = aws_security_group.master.id
    agent  = aws_security_group.agent.id
    broker = aws_security_group.broker.id
  }
  # Spark's executor and block manager ports on the agents: the unprivileged range minus
  # every port a service of this module listens on (2181, 2888, 3000, 3888, 5050, 5051,
  # 7080-7082, 9090, 9093), so a rule for Spark never opens one of them by accident.
  spark_ports = {
    low        = { from = 1024, to = 2180 }
    below_2888 = { from = 2182, to = 2887 }
    below_3000 = { from = 2889, to = 2999 }
    below_3888 = { from = 3001, to = 3887 }
    below_5050 = { from = 3889, to = 5049 }
    below_7080 = { from = 5052, to = 7079 }
    below_9090 = { from = 7083, to = 9089 }
    below_9093 = { from = 9091, to = 9092 }
    above_9093 = { from = 9094, to = 65535 }
  }
  # Between roles: what each flow is for. An agent reaches a master's 5050 (to register) and
  # other agents' Spark ports, and ZooKeeper only when there are three masters: an agent
  # follows a leader change only through ZooKeeper (a plain --master=HOST:PORT names one
  # master), and then the agents' firewall lets only root (the agent) through.
  member_flows = merge(
    {
      agent_master_mesos     = { source = "agent", group = "master", from = 5050, to = 5050, description = "Mesos agents register with the master (authenticated)" }
      broker_master_mesos    = { source = "broker", group = "master", from = 5050, to = 5050, description = "the broker calls the scheduler and operator APIs (authenticated)" }
      broker_master_zk       = { source = "broker", group = "master", from = 2181, to = 2181, description = "the broker finds the leading master in ZooKeeper (and, with several brokers, their leader and state)" }
      broker_broker_metrics  = { source = "broker", group = "broker", from = 7082, to = 7082, description = "Prometheus on each broker host scrapes every broker" }
      master_master_mesos    = { source = "master", group = "master", from = 5050, to = 5050, description = "replicated log between masters" }
      master_master_zk       = { source = "master", group = "master", from = 2181, to = 2181, description = "masters find the leader in ZooKeeper" }
      master_master_quorum   = { source = "master", group = "master", from = 2888, to = 2888, description = "ZooKeeper quorum" }
      master_master_election = { source = "master", group = "master", from = 3888, to = 3888, description = "ZooKeeper leader election" }
      master_agent_mesos     = { source = "master", group = "agent", from = 5051, to = 5051, description = "the master talks to its agents" }
    },
    {
      for name, p in local.spark_ports : "agent_agent_spark_${name}" => {
        source = "agent", group = "agent", from = p.from, to = p.to, description = "Spark executors and block managers, between agents"
      }
    },
    {
      for name, flow in {
        agent_master_zk = { source = "agent", group = "master", from = 2181, to = 2181, description = "agents follow the leading master (three masters only; root only on the agents)" }
      } : name => flow if var.master_count > 1
    },
  )
  # From networks: admin ports from admin_cidrs only, the tenant API (HTTP and gRPC, token
  # required) on the broker host and Spark's ports on the agents from tenant_cidrs.
  admin_ports = {
    master_ssh   = { group = "master", from = 22, to = 22, description = "SSH" }
    master_mesos = { group = "master", from = 5050, to = 5050, description = "Mesos master UI and API" }
    master_zk    = { group = "master", from = 2181, to = 2181, description = "ZooKeeper client port" }
    agent_ssh    = { group = "agent", from = 22, to = 22, description = "SSH" }
    agent_mesos  = { group = "agent", from = 5051, to = 5051, description = "Mesos agent API and sandboxes" }
    broker_ssh   = { group = "broker", from = 22, to = 22, description = "SSH" }
    broker_api   = { group = "broker", from = 7080, to = 7082, description = "fairbroker tenant API (HTTP, gRPC) and metrics" }
    prometheus   = { group = "broker", from = 9090, to = 9090, description = "Prometheus" }
    alertmanager = { group = "broker", from = 9093, to = 9093, description = "Alertmanager" }
    grafana      = { group = "broker", from = 3000, to = 3000, description = "Grafana" }
  }
  network_flows = merge(
    {
      for pair in setproduct(keys(local.admin_ports), var.admin_cidrs) :
      "admin_${pair[0]}_${pair[1]}" => merge(local.admin_ports[pair[0]], {
        cidr = pair[1], description = "${local.admin_ports[pair[0]].description} (admin)"
      })
    },
    {
      for cidr in local.tenant_cidrs : "tenant_api_${cidr}" => {
        group = "broker", from = 7080, to = 7081, cidr = cidr, description = "fairbroker tenant API (Spark drivers)"
      }
    },
    {
      for pair in setproduct(keys(local.spark_ports), local.tenant_cidrs) :
      "tenant_spark_${pair[0]}_${pair[1]}" => {
        group = "agent", from = local.spark_ports[pair[0]].from, to = local.spark_ports[pair[0]].to,
        cidr  = pair[1], description = "Spark executors and block managers for drivers in the tenant networks"
      }
    },
  )
}

resource "aws_security_group" "master" {
  name        = "${var.name}-master"
  description = "Mesos masters and ZooKeeper"
  vpc_id      = aws_vpc.cluster.id
  tags        = { Name = "${var.name}-master" }
}

resource "aws_security_group" "agent" {
  name        = "${var.name}-agent"
  description = "Mesos agents running the Spark executors of tenants"
  vpc_id      = aws_vpc.cluster.id
  tags        = { Name = "${var.name}-agent" }
}

resource "aws_security_group" "broker" {
  name        = "${var.name}-broker"
  description = "fairbroker, Prometheus, Alertmanager and Grafana"
  vpc_id      = aws_vpc.cluster.id
  tags        = { Name = "${var.name}-broker" }
}

resource "aws_vpc_security_group_ingress_rule" "member" {
  #checkov:skip=CKV_AWS_25:the source is a security group of this module, never a network; Spark's range covers 3389 only between agents
  for_each                     = local.member_flows
  security_group_id            = local.groups[each.value.group]
  referenced_security_group_id = local.groups[each.value.source]
  ip_protocol                  = "tcp"
  from_port                    = each.value.from
  to_port                      = each.value.to
  description                  = each.value.description
}

resource "aws_vpc_security_group_ingress_rule" "network" {
  #checkov:skip=CKV_AWS_25:Spark's range covers 3389 on the agents from tenant_cidrs only (no RDP runs there); admin_cidrs and tenant_cidrs refuse the Internet
  for_each          = local.network_flows
  security_group_id = local.groups[each.value.group]
  cidr_ipv4         = each.value.cidr
  ip_protocol       = "tcp"
  from_port         = each.value.from
  to_port           = each.value.to
  description       = each.value.description
}

resource "aws_vpc_security_group_egress_rule" "all" {
  #checkov:skip=CKV_AWS_382:cloud-init installs Java, Spark, Mesos and the wheel from the Internet; put an egress proxy in front to narrow this
  for_each          = local.groups
  security_group_id = each.value
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "-1"
  description       = "Package and artifact downloads, AWS APIs, Spark drivers"
}
