variable "region" {
  description = "AWS region."
  type        = string
  default     = "us-east-1"
}

variable "name" {
  description = "Name prefix of every resource (letters, digits and dashes)."
  type        = string
  default     = "fairbroker"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}$", var.name))
    error_message = "name: 2-31 lower-case letters, digits or dashes, starting with a letter."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC."
  type        = string
  default     = "10.42.0.0/16"
  validation {
    condition     = can(cidrnetmask(var.vpc_cidr)) && try(cidrsubnet(var.vpc_cidr, 0, 0) == var.vpc_cidr, false) && try(tonumber(split("/", var.vpc_cidr)[1]) <= 24 && tonumber(split("/", var.vpc_cidr)[1]) >= 16, false)
    error_message = "vpc_cidr: an IPv4 CIDR block written canonically, from /16 to /24 (the sizes AWS allows for a VPC)."
  }
}

variable "subnet_cidr" {
  description = "CIDR block of the cluster's subnet (inside vpc_cidr)."
  type        = string
  default     = "10.42.1.0/24"
  validation {
    condition     = can(cidrnetmask(var.subnet_cidr)) && try(cidrsubnet(var.subnet_cidr, 0, 0) == var.subnet_cidr, false) && try(tonumber(split("/", var.subnet_cidr)[1]) <= 27, false)
    error_message = "subnet_cidr: an IPv4 CIDR block written canonically, /27 or wider (it holds the masters from .10 and the broker at .20)."
  }
}

# A CIDR block is checked by parsing it: an IPv4 block (cidrnetmask refuses IPv6 and
# malformed text), written canonically (cidrsubnet(c, 0, 0) == c: no host bits, no leading
# zeros such as 0.0.0.0/00 or 010.0.0.0/8), no wider than min_cidr_prefix allows. So the
# whole Internet is refused however it is written: 0.0.0.0/0, 0.0.0.0/00, ::/0, or two /1
# blocks (each wider than the narrowest limit allowed, /8).
variable "min_cidr_prefix" {
  description = "The widest block admin_cidrs and tenant_cidrs may hold, as a prefix length: 16 allows a /16 (65,536 addresses) and narrower. From 8 to 32."
  type        = number
  default     = 16
  validation {
    condition     = var.min_cidr_prefix >= 8 && var.min_cidr_prefix <= 32 && floor(var.min_cidr_prefix) == var.min_cidr_prefix
    error_message = "min_cidr_prefix: a whole number from 8 to 32."
  }
}

variable "admin_cidrs" {
  description = "Who may reach the admin ports (SSH, Mesos 5050/5051, ZooKeeper, the broker's API and metrics, Prometheus, Alertmanager, Grafana): IPv4 blocks no wider than min_cidr_prefix."
  type        = list(string)
  validation {
    condition     = length(var.admin_cidrs) > 0
    error_message = "admin_cidrs: at least one CIDR block (there is no default: say who administers)."
  }
  validation {
    condition     = alltrue([for c in var.admin_cidrs : can(cidrnetmask(c)) && try(cidrsubnet(c, 0, 0) == c, false)])
    error_message = "admin_cidrs: each entry must be an IPv4 CIDR block written canonically (network address, no leading zeros), e.g. 203.0.113.0/24."
  }
  validation {
    condition     = alltrue([for c in var.admin_cidrs : try(tonumber(split("/", c)[1]) >= var.min_cidr_prefix, false)])
    error_message = "admin_cidrs: a block is wider than min_cidr_prefix allows (never the whole Internet: 0.0.0.0/0 however written, ::/0, two /1 blocks)."
  }
}

variable "tenant_cidrs" {
  description = "Where Spark drivers run: they reach the broker's tenant API (7080-7081) and the executors' ports on the agents. IPv4 blocks no wider than min_cidr_prefix; default: the VPC only."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for c in var.tenant_cidrs : can(cidrnetmask(c)) && try(cidrsubnet(c, 0, 0) == c, false)])
    error_message = "tenant_cidrs: each entry must be an IPv4 CIDR block written canonically (network address, no leading zeros), e.g. 10.42.0.0/16."
  }
  validation {
    condition     = alltrue([for c in var.tenant_cidrs : try(tonumber(split("/", c)[1]) >= var.min_cidr_prefix, false)])
    error_message = "tenant_cidrs: a block is wider than min_cidr_prefix allows (never the whole Internet: 0.0.0.0/0 however written, ::/0, two /1 blocks)."
  }
}

variable "ssh_key_name" {
  description = "Name of an existing EC2 key pair for SSH (null: no key, use SSM)."
  type        = string
  default     = null
}

variable "ami_id" {
  description = "AMI of every instance (null: the latest Ubuntu 22.04 LTS from Canonical)."
  type        = string
  default     = null
  validation {
    condition     = var.ami_id == null || can(regex("^ami-[0-9a-f]{8,17}$", var.ami_id))
    error_message = "ami_id: null or an AMI id (ami-...)."
  }
}

variable "master_count" {
  description = "Mesos masters, each with ZooKeeper: 1, or 3 for high availability."
  type        = number
  default     = 1
  validation {
    condition     = contains([1, 3], var.master_count)
    error_message = "master_count: 1 or 3."
  }
}

variable "master_instance_type" {
  description = "Instance type of the masters."
  type        = string
  default     = "t3.medium"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*[0-9][a-z0-9-]*\\.[a-z0-9]+$", var.master_instance_type))
    error_message = "master_instance_type: an EC2 instance type such as t3.medium."
  }
}

variable "broker_count" {
  description = "Broker hosts: 1, or 2-3 for fail-over (one leads, elected in the masters' ZooKeeper where the brokers keep their state; docs/operations.md)."
  type        = number
  default     = 2
  validation {
    condition     = var.broker_count >= 1 && var.broker_count <= 3 && floor(var.broker_count) == var.broker_count
    error_message = "broker_count: 1, 2 or 3."
  }
}

variable "broker_instance_type" {
  description = "Instance type of the broker host (the broker, Prometheus and Grafana)."
  type        = string
  default     = "t3.medium"
  validation {
    condition     = can(regex("^[a-z][a-z0-9-]*[0-9][a-z0-9-]*\\.[a-z0-9]+$", var.broker_instance_type))
    error_message = "broker_instance_type: an EC2 instance type such as t3.medium."
  }
}

# The defaults are paper 002's six servers: two each of 4 CPU/14 GB, 8 CPU/8 GB and
# 6 CPU/11 GB. `cpus` and `mem_mb` are what each agent declares to Mesos (--resources), so an
# instance type larger than the declaration is fine; smaller is refused by the agent.
variable "agent_types" {
  description = "Agent types: count, EC2 instance type, the cpus and mem (MiB) declared to Mesos, and the value of the agent attribute `type`."
  type = map(object({
    count         = number
    instance_type = string
    cpus          = number
    mem_mb        = number
  }))
  default = {
    t1 = { count = 2, instance_type = "r5.xlarge", cpus = 4, mem_mb = 14336 }
    t2 = { count = 2, instance_type = "c5.2xlarge", cpus = 8, mem_mb = 8192 }
    t3 = { count = 2, instance_type = "m5.2xlarge", cpus = 6, mem_mb = 11264 }
  }
  validation {
    condition     = alltrue([for t in values(var.agent_types) : t.count >= 0 && t.count <= 100 && floor(t.count) == t.count])
    error_message = "agent_types: each count is a whole number from 0 to 100."
  }
  validation {
    condition     = alltrue([for t in values(var.agent_types) : can(regex("^[a-z][a-z0-9-]*[0-9][a-z0-9-]*\\.[a-z0-9]+$", t.instance_type))])
    error_message = "agent_types: each instance_type is an EC2 instance type such as m5.2xlarge."
  }
  validation {
    condition     = alltrue([for t in values(var.agent_types) : t.cpus > 0 && t.mem_mb >= 1024])
    error_message = "agent_types: cpus must be positive and mem_mb at least 1024."
  }
  validation {
    condition     = alltrue([for k in keys(var.agent_types) : can(regex("^[a-z0-9]{1,16}$", k))])
    error_message = "agent_types: type names are 1-16 lower-case letters or digits."
  }
}

variable "mesos_tarball_url" {
  description = "HTTPS URL of a tarball of Mesos 1.11.0 built for the AMI (bin/, sbin/, lib/, libexec/ under /opt/mesos; e.g. exported from docker/agent/Dockerfile's build stage). Apache publishes no packages."
  type        = string
  validation {
    condition     = can(regex("^https://", var.mesos_tarball_url))
    error_message = "mesos_tarball_url: an https:// URL."
  }
}

variable "mesos_tarball_sha256" {
  description = "SHA-256 of mesos_tarball_url, checked before it is unpacked."
  type        = string
  validation {
    condition     = can(regex("^[0-9a-f]{64}$", var.mesos_tarball_sha256))
    error_message = "mesos_tarball_sha256: 64 lower-case hex digits."
  }
}

variable "spark_version" {
  description = "Spark on the agents and the broker host: the version the fairbroker plugin is built for."
  type        = string
  default     = "4.3.0"
  validation {
    condition     = can(regex("^[34]\\.[0-9]+\\.[0-9]+$", var.spark_version))
    error_message = "spark_version: a Spark 3.x or 4.x version such as 4.3.0."
  }
}

variable "fairbroker_wheel_url" {
  description = "HTTPS URL of the fairbroker wheel (python -m build) installed on the broker host."
  type        = string
  validation {
    condition     = can(regex("^https://.*\\.whl$", var.fairbroker_wheel_url))
    error_message = "fairbroker_wheel_url: an https:// URL of a .whl file."
  }
}

variable "broker_role" {
  description = "Mesos role of the broker's framework; its quota is set at start."
  type        = string
  default     = "spark"
  validation {
    condition     = can(regex("^[a-zA-Z0-9_][a-zA-Z0-9_.-]*$", var.broker_role)) && var.broker_role != "*"
    error_message = "broker_role: a Mesos role name (not *)."
  }
}

variable "broker_scheduler" {
  description = "The broker's scheduler."
  type        = string
  default     = "rpsdsf"
  validation {
    condition     = contains(["drf", "tsf", "psdsf", "rpsdsf", "bfdrf"], var.broker_scheduler)
    error_message = "broker_scheduler: one of drf, tsf, psdsf, rpsdsf, bfdrf."
  }
}

variable "root_volume_gb" {
  description = "Root volume size of every instance (GiB)."
  type        = number
  default     = 40
  validation {
    condition     = var.root_volume_gb >= 20 && var.root_volume_gb <= 2000
    error_message = "root_volume_gb: from 20 to 2000."
  }
}

# TLS on the brokers' tenant API (HTTP and gRPC) and /metrics. The module draws no
# certificate (no TLS provider is assumed): give a certificate whose names cover how drivers
# and Prometheus address the brokers (their private IPs, and any DNS name given to tenants),
# its key and the CA that issued it. The key reaches the broker hosts in their user data (as
# the Mesos secret does): keep the Terraform state private.
variable "broker_tls_cert" {
  description = "PEM certificate (chain) the brokers serve TLS with (null: plain text; then keep the tenant API on a private network)."
  type        = string
  default     = null
  validation {
    condition     = var.broker_tls_cert == null || can(regex("^\\s*-----BEGIN CERTIFICATE-----[\\s\\S]+-----END CERTIFICATE-----\\s*$", var.broker_tls_cert))
    error_message = "broker_tls_cert: a PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)."
  }
  validation {
    condition     = (var.broker_tls_cert == null) == (var.broker_tls_key == null)
    error_message = "broker_tls_cert: broker_tls_cert and broker_tls_key go together."
  }
}

variable "broker_tls_key" {
  description = "PEM private key (unencrypted) of broker_tls_cert."
  type        = string
  default     = null
  sensitive   = true
  validation {
    condition     = var.broker_tls_key == null || can(regex("^\\s*-----BEGIN (EC |RSA )?PRIVATE KEY-----[\\s\\S]+-----END (EC |RSA )?PRIVATE KEY-----\\s*$", var.broker_tls_key))
    error_message = "broker_tls_key: an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----, EC or RSA)."
  }
}

variable "broker_tls_ca" {
  description = "PEM certificate of the CA that issued broker_tls_cert: the brokers check their certificate against it at start, Prometheus and `fairbroker status --config` trust it; give it to the tenants for spark.fairbroker.caFile (null: a certificate from a CA the hosts already trust)."
  type        = string
  default     = null
  validation {
    condition     = var.broker_tls_ca == null || can(regex("^\\s*-----BEGIN CERTIFICATE-----[\\s\\S]+-----END CERTIFICATE-----\\s*$", var.broker_tls_ca))
    error_message = "broker_tls_ca: a PEM certificate."
  }
  validation {
    condition     = var.broker_tls_ca == null || var.broker_tls_cert != null
    error_message = "broker_tls_ca: the CA of broker_tls_cert; give broker_tls_cert and broker_tls_key too."
  }
}
