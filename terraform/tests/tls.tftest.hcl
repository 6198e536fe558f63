# `terraform test`: TLS on the brokers from the certificate variables (the module draws no
# certificate). The PEM bodies below are placeholders, not keys: only their framing is read.
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

# Without the variables: no TLS key, file or setting anywhere, Prometheus scrapes plain HTTP.
run "tls_off" {
  command = apply
  assert {
    condition = (
      !strcontains(local.user_data_broker, "tls_")
      && !strcontains(local.user_data_broker, "/etc/fairbroker/tls.key")
      && !can(yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/prometheus/prometheus.yml"][0]).scrape_configs[0].scheme)
    )
    error_message = "without broker_tls_* the broker must not be configured for TLS"
  }
}

# With them: every broker (leader and standby) serves TLS with the given files, the key
# readable by root and the fairbroker group only, Prometheus scrapes over HTTPS trusting the CA.
run "tls_on" {
  command = apply
  variables {
    broker_count    = 2
    broker_tls_cert = "-----BEGIN CERTIFICATE-----\nplaceholder-certificate\n-----END CERTIFICATE-----\n"
    broker_tls_key  = "-----BEGIN PRIVATE KEY-----\nplaceholder-not-a-key\n-----END PRIVATE KEY-----\n"
    broker_tls_ca   = "-----BEGIN CERTIFICATE-----\nplaceholder-ca\n-----END CERTIFICATE-----\n"
  }
  assert {
    condition = alltrue([for data in concat([local.user_data_broker], local.user_data_broker_standby) : (
      yamldecode([for f in yamldecode(data).write_files : f.content if f.path == "/etc/fairbroker/fairbroker.yaml"][0]).tls_cert == "/etc/fairbroker/tls.crt"
      && yamldecode([for f in yamldecode(data).write_files : f.content if f.path == "/etc/fairbroker/fairbroker.yaml"][0]).tls_key == "/etc/fairbroker/tls.key"
      && yamldecode([for f in yamldecode(data).write_files : f.content if f.path == "/etc/fairbroker/fairbroker.yaml"][0]).tls_ca == "/etc/fairbroker/ca.crt"
    )])
    error_message = "every broker's fairbroker.yaml must name tls_cert, tls_key and tls_ca"
  }
  assert {
    condition = alltrue([for data in concat([local.user_data_broker], local.user_data_broker_standby) : (
      [for f in yamldecode(data).write_files : trimspace(f.content) if f.path == "/etc/fairbroker/tls.key"] == [trimspace(var.broker_tls_key)]
      && [for f in yamldecode(data).write_files : f.permissions if f.path == "/etc/fairbroker/tls.key"] == ["0600"]
      && [for f in yamldecode(data).write_files : trimspace(f.content) if f.path == "/etc/fairbroker/tls.crt"] == [trimspace(var.broker_tls_cert)]
      && [for f in yamldecode(data).write_files : trimspace(f.content) if f.path == "/etc/fairbroker/ca.crt"] == [trimspace(var.broker_tls_ca)]
      && contains(yamldecode(data).runcmd, "chmod 0640 /etc/fairbroker/tls.key")
      && index(yamldecode(data).runcmd, "chgrp -R fairbroker /etc/fairbroker") < index(yamldecode(data).runcmd, "chmod 0640 /etc/fairbroker/tls.key")
    )])
    error_message = "the TLS files must be written as given, the key 0600 then 0640 to the fairbroker group"
  }
  assert {
    condition = (
      yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/prometheus/prometheus.yml"][0]).scrape_configs[0].scheme == "https"
      && yamldecode([for f in yamldecode(local.user_data_broker).write_files : f.content if f.path == "/etc/prometheus/prometheus.yml"][0]).scrape_configs[0].tls_config.ca_file == "/etc/fairbroker/ca.crt"
    )
    error_message = "Prometheus must scrape the brokers over HTTPS trusting the CA"
  }
}

run "refuses_a_certificate_without_its_key" {
  command = plan
  variables {
    broker_tls_cert = "-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n"
  }
  expect_failures = [var.broker_tls_cert]
}

run "refuses_a_key_that_is_not_pem" {
  command = plan
  variables {
    broker_tls_cert = "-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n"
    broker_tls_key  = "/etc/fairbroker/tls.key"
  }
  expect_failures = [var.broker_tls_key]
}

run "refuses_an_encrypted_key" {
  command = plan
  variables {
    broker_tls_cert = "-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n"
    broker_tls_key  = "-----BEGIN ENCRYPTED PRIVATE KEY-----\nplaceholder\n-----END ENCRYPTED PRIVATE KEY-----\n"
  }
  expect_failures = [var.broker_tls_key]
}

run "refuses_a_ca_without_a_certificate" {
  command = plan
  variables {
    broker_tls_ca = "-----BEGIN CERTIFICATE-----\nplaceholder\n-----END CERTIFICATE-----\n"
  }
  expect_failures = [var.broker_tls_ca]
}

run "refuses_a_certificate_that_is_a_path" {
  command = plan
  variables {
    broker_tls_cert = "/etc/fairbroker/tls.crt"
    broker_tls_key  = "-----BEGIN PRIVATE KEY-----\nplaceholder\n-----END PRIVATE KEY-----\n"
  }
  expect_failures = [var.broker_tls_cert]
}
