# Mesos credentials: one principal for the agents, one for the broker's framework. Each secret
# is drawn once, at the first apply (uuid() reads a cryptographic random source; 244 random
# bits), and kept after (ignore_changes); it lives in the Terraform state and the instances'
# user data, nowhere in this repository. On the agents only root may reach the instance
# metadata service that serves the user data (templates/agent.yaml.tftpl).
resource "terraform_data" "mesos_secret" {
  for_each = toset(["agent", "broker"])
  input    = replace("${uuid()}${uuid()}", "-", "")
  lifecycle {
    ignore_changes = [input]
  }
}

locals {
  agent_principal  = "mesos-agent"
  broker_principal = "fairbroker"
  # --credentials of the masters: every principal that may register (agents, the broker)
  mesos_credentials = jsonencode({ credentials = [
    { principal = local.agent_principal, secret = terraform_data.mesos_secret["agent"].output },
    { principal = local.broker_principal, secret = terraform_data.mesos_secret["broker"].output },
  ] })
  # One master: the agents address it directly and never need ZooKeeper. Three: an agent
  # follows a leader change only through ZooKeeper (security.tf).
  agent_master = var.master_count == 1 ? "${local.master_ips[0]}:5050" : local.zk_url

  user_data_master = [for i in range(var.master_count) : templatefile("${path.module}/templates/master.yaml.tftpl", merge(local.common, {
    id          = i + 1
    master_ips  = local.master_ips
    quorum      = floor(var.master_count / 2) + 1
    cluster     = var.name
    credentials = local.mesos_credentials
  }))]

  user_data_agent = { for key, agent in local.agents : key => templatefile("${path.module}/templates/agent.yaml.tftpl", merge(local.common, {
    resources  = "cpus:${agent.cpus};mem:${agent.mem_mb}"
    attributes = "type:${agent.type}"
    master     = local.agent_master
    master_ips = local.master_ips
    credential = jsonencode({ principal = local.agent_principal, secret = terraform_data.mesos_secret["agent"].output })
    http_credentials = jsonencode({ credentials = [
      { principal = local.agent_principal, secret = terraform_data.mesos_secret["agent"].output },
    ] })
  })) }

  broker_vars = merge(local.common, {
    wheel_url       = var.fairbroker_wheel_url
    install_pymesos = file("${path.module}/../scripts/install_pymesos.py")
    role            = var.broker_role
    scheduler       = var.broker_scheduler
    master_ips      = local.master_ips
    quota_cpus      = sum([for a in values(local.agents) : a.cpus])
    quota_mem       = sum([for a in values(local.agents) : a.mem_mb])
    ha_url          = local.broker_ha
    # every broker host's Prometheus scrapes every broker (the leader and the standbys)
    metrics_targets = jsonencode([for ip in local.broker_ips : "${ip}:7082"])
    principal       = local.broker_principal
    mesos_secret    = terraform_data.mesos_secret["broker"].output
    # TLS: empty strings when not given (the template leaves TLS out)
    tls_cert       = var.broker_tls_cert == null ? "" : trimspace(var.broker_tls_cert)
    tls_key        = var.broker_tls_key == null ? "" : trimspace(var.broker_tls_key)
    tls_ca         = var.broker_tls_ca == null ? "" : trimspace(var.broker_tls_ca)
    systemd_unit   = file("${path.module}/../deploy/systemd/fairbroker.service")
    alerts         = file("${path.module}/../deploy/alerts.yml")
    alertmanager   = file("${path.module}/../deploy/alertmanager.yml")
    grafana_board  = file("${path.module}/../deploy/grafana/fairbroker.json")
    grafana_boards = file("${path.module}/../deploy/grafana/dashboards.yml")
  })
  user_data_broker = templatefile("${path.module}/templates/broker.yaml.tftpl", merge(local.broker_vars, {
    broker_ip = local.broker_ip
  }))
  user_data_broker_standby = [for ip in slice(local.broker_ips, 1, var.broker_count) : templatefile("${path.module}/templates/broker.yaml.tftpl", merge(local.broker_vars, {
    broker_ip = ip
  }))]
}
