output "mesos_master_url" {
  description = "The Mesos master's UI and API (the leading master is elected among these)."
  value       = "http://${aws_instance.master[0].public_ip}:5050"
}

output "mesos_master_zk" {
  description = "The masters through ZooKeeper, as frameworks and agents address them."
  value       = local.zk_url
}

output "broker_api" {
  description = "Spark's master URL for jobs inside the VPC: every broker (sparkbroker://HOST:7080[,HOST:7080]; the plugin follows the leader)."
  value       = "sparkbroker://${join(",", [for ip in concat([aws_instance.broker.private_ip], aws_instance.broker_standby[*].private_ip) : "${ip}:7080"])}"
}

output "broker_grpc" {
  description = "The broker's gRPC address (fairbroker status / configure --broker)."
  value       = "${aws_instance.broker.public_ip}:7081"
}

output "prometheus_url" {
  description = "Prometheus on the broker host (admin CIDRs only)."
  value       = "http://${aws_instance.broker.public_ip}:9090"
}

output "grafana_url" {
  description = "Grafana on the broker host (admin CIDRs only)."
  value       = "http://${aws_instance.broker.public_ip}:3000"
}

output "agents" {
  description = "Agent name => private IP, type."
  value       = { for k, a in aws_instance.agent : k => { ip = a.private_ip, type = local.agents[k].type } }
}

output "alertmanager_url" {
  description = "Alertmanager on the broker host (admin CIDRs only)."
  value       = "http://${aws_instance.broker.public_ip}:9093"
}

output "mesos_credentials_sha256" {
  description = "SHA-256 of the masters' Mesos credentials file: the same on every apply (the secrets are drawn once), and comparable with `sha256sum /etc/mesos/credentials.json` on a master."
  value       = sha256(local.mesos_credentials)
}
