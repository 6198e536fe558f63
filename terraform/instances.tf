data "aws_ami" "ubuntu" {
  most_recent = true
  owners      = ["099720109477"] # Canonical
  filter {
    name   = "name"
    values = ["ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*"]
  }
}

locals {
  ami = coalesce(var.ami_id, data.aws_ami.ubuntu.id)
  # one entry per agent: "t1-0" => {type = "t1", ...}
  agents = merge([
    for type, spec in var.agent_types : {
      for i in range(spec.count) : "${type}-${i}" => merge(spec, { type = type })
    }
  ]...)
  master_ips = [for i in range(var.master_count) : cidrhost(var.subnet_cidr, 10 + i)]
  broker_ips = [for i in range(var.broker_count) : cidrhost(var.subnet_cidr, 20 + i)]
  broker_ip  = local.broker_ips[0]
  zk_url     = "zk://${join(",", [for ip in local.master_ips : "${ip}:2181"])}/mesos"
  # several brokers: elected, and their state kept, in the masters' ZooKeeper
  broker_ha = var.broker_count > 1 ? "zk://${join(",", [for ip in local.master_ips : "${ip}:2181"])}/fairbroker" : ""
  common = {
    mesos_install = templatefile("${path.module}/templates/mesos-install.sh.tftpl", {
      mesos_tarball_url    = var.mesos_tarball_url
      mesos_tarball_sha256 = var.mesos_tarball_sha256
    })
    spark_version = var.spark_version
    zk_url        = local.zk_url
  }
}

# Every instance: encrypted root volume, IMDSv2 only, detailed monitoring.
resource "aws_instance" "master" {
  #checkov:skip=CKV_AWS_88:a public address for admin access from var.admin_cidrs only (security group); use a VPN and drop it where one exists
  count                       = var.master_count
  ami                         = local.ami
  instance_type               = var.master_instance_type
  subnet_id                   = aws_subnet.cluster.id
  private_ip                  = local.master_ips[count.index]
  vpc_security_group_ids      = [aws_security_group.master.id]
  associate_public_ip_address = true
  key_name                    = var.ssh_key_name
  monitoring                  = true
  ebs_optimized               = true
  iam_instance_profile        = aws_iam_instance_profile.node.name
  user_data_base64            = base64gzip(local.user_data_master[count.index])
  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required"
  }
  root_block_device {
    encrypted   = true
    volume_size = var.root_volume_gb
  }
  tags = { Name = "${var.name}-master-${count.index + 1}", Role = "mesos-master" }
}

resource "aws_instance" "agent" {
  #checkov:skip=CKV_AWS_88:a public address for package downloads and admin access from var.admin_cidrs only; use a NAT gateway and VPN to drop it
  for_each                    = local.agents
  ami                         = local.ami
  instance_type               = each.value.instance_type
  subnet_id                   = aws_subnet.cluster.id
  vpc_security_group_ids      = [aws_security_group.agent.id]
  associate_public_ip_address = true
  key_name                    = var.ssh_key_name
  monitoring                  = true
  ebs_optimized               = true
  iam_instance_profile        = aws_iam_instance_profile.node.name
  user_data_base64            = base64gzip(local.user_data_agent[each.key])
  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required"
  }
  root_block_device {
    encrypted   = true
    volume_size = var.root_volume_gb
  }
  tags = { Name = "${var.name}-agent-${each.key}", Role = "mesos-agent", AgentType = each.value.type }
}

resource "aws_instance" "broker" {
  #checkov:skip=CKV_AWS_88:a public address for admin access from var.admin_cidrs only (security group); use a VPN and drop it where one exists
  ami                         = local.ami
  instance_type               = var.broker_instance_type
  subnet_id                   = aws_subnet.cluster.id
  private_ip                  = local.broker_ip
  vpc_security_group_ids      = [aws_security_group.broker.id]
  associate_public_ip_address = true
  key_name                    = var.ssh_key_name
  monitoring                  = true
  ebs_optimized               = true
  iam_instance_profile        = aws_iam_instance_profile.node.name
  user_data_base64            = base64gzip(local.user_data_broker)
  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required"
  }
  root_block_device {
    encrypted   = true
    volume_size = var.root_volume_gb
  }
  depends_on = [aws_instance.master]
  tags       = { Name = "${var.name}-broker", Role = "fairbroker" }
}

# The standby brokers (broker_count > 1): the same host as the first, another address.
resource "aws_instance" "broker_standby" {
  #checkov:skip=CKV_AWS_88:a public address for admin access from var.admin_cidrs only (security group); use a VPN and drop it where one exists
  count                       = var.broker_count - 1
  ami                         = local.ami
  instance_type               = var.broker_instance_type
  subnet_id                   = aws_subnet.cluster.id
  private_ip                  = local.broker_ips[count.index + 1]
  vpc_security_group_ids      = [aws_security_group.broker.id]
  associate_public_ip_address = true
  key_name                    = var.ssh_key_name
  monitoring                  = true
  ebs_optimized               = true
  iam_instance_profile        = aws_iam_instance_profile.node.name
  user_data_base64            = base64gzip(local.user_data_broker_standby[count.index])
  metadata_options {
    http_endpoint = "enabled"
    http_tokens   = "required"
  }
  root_block_device {
    encrypted   = true
    volume_size = var.root_volume_gb
  }
  depends_on = [aws_instance.master]
  tags       = { Name = "${var.name}-broker-${count.index + 2}", Role = "fairbroker" }
}

# Instances may be managed through SSM instead of SSH; nothing else.
data "aws_iam_policy_document" "node_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "node" {
  name               = "${var.name}-node"
  assume_role_policy = data.aws_iam_policy_document.node_assume.json
}

resource "aws_iam_role_policy_attachment" "node_ssm" {
  role       = aws_iam_role.node.name
  policy_arn = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
}

resource "aws_iam_instance_profile" "node" {
  name = "${var.name}-node"
  role = aws_iam_role.node.name
}
