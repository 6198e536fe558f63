# `terraform test`: the variables' validations refuse what they must (each run plans with one
# bad value and expects exactly that variable's validation to fail) and accept good values.
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

run "accepts_good_values" {
  command = plan
  variables {
    admin_cidrs  = ["203.0.113.7/32", "198.51.100.0/24"]
    tenant_cidrs = ["10.42.0.0/16"]
    master_count = 3
  }
}

run "accepts_a_wider_block_when_the_operator_allows_it" {
  command = plan
  variables {
    min_cidr_prefix = 8
    admin_cidrs     = ["10.0.0.0/8"]
  }
}

run "refuses_admin_internet" {
  command = plan
  variables {
    admin_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_internet_padded_prefix" {
  command = plan
  variables {
    admin_cidrs = ["0.0.0.0/00"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_two_halves" {
  command = plan
  variables {
    admin_cidrs = ["0.0.0.0/1", "128.0.0.0/1"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_ipv6_internet" {
  command = plan
  variables {
    admin_cidrs = ["203.0.113.0/24", "::/0"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_wider_than_the_limit" {
  command = plan
  variables {
    admin_cidrs = ["10.0.0.0/8"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_host_bits" {
  command = plan
  variables {
    admin_cidrs = ["203.0.113.7/24"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_leading_zeros" {
  command = plan
  variables {
    admin_cidrs = ["010.0.0.0/16"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_not_an_address" {
  command = plan
  variables {
    admin_cidrs = ["10.0.0.300/24"]
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_admin_empty" {
  command = plan
  variables {
    admin_cidrs = []
  }
  expect_failures = [var.admin_cidrs]
}

run "refuses_tenant_internet" {
  command = plan
  variables {
    tenant_cidrs = ["0.0.0.0/0"]
  }
  expect_failures = [var.tenant_cidrs]
}

run "refuses_tenant_internet_padded_prefix" {
  command = plan
  variables {
    tenant_cidrs = ["0.0.0.0/000"]
  }
  expect_failures = [var.tenant_cidrs]
}

run "refuses_tenant_two_halves" {
  command = plan
  variables {
    tenant_cidrs = ["0.0.0.0/1", "128.0.0.0/1"]
  }
  expect_failures = [var.tenant_cidrs]
}

run "refuses_tenant_ipv6" {
  command = plan
  variables {
    tenant_cidrs = ["::/0"]
  }
  expect_failures = [var.tenant_cidrs]
}

run "refuses_min_prefix_too_wide" {
  command = plan
  variables {
    min_cidr_prefix = 1
  }
  expect_failures = [var.min_cidr_prefix]
}

run "refuses_vpc_too_small" {
  command = plan
  variables {
    vpc_cidr = "10.42.0.0/28"
  }
  expect_failures = [var.vpc_cidr]
}

run "refuses_vpc_not_canonical" {
  command = plan
  variables {
    vpc_cidr = "10.42.0.1/16"
  }
  expect_failures = [var.vpc_cidr]
}

run "refuses_subnet_too_small" {
  command = plan
  variables {
    subnet_cidr = "10.42.1.0/28"
  }
  expect_failures = [var.subnet_cidr]
}

run "refuses_two_masters" {
  command = plan
  variables {
    master_count = 2
  }
  expect_failures = [var.master_count]
}

run "refuses_http_tarball" {
  command = plan
  variables {
    mesos_tarball_url = "http://insecure.example/mesos.tgz"
  }
  expect_failures = [var.mesos_tarball_url]
}

run "refuses_role_star" {
  command = plan
  variables {
    broker_role = "*"
  }
  expect_failures = [var.broker_role]
}
