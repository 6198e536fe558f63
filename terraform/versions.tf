terraform {
  required_version = ">= 1.9.0" # validations that refer to another variable
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 5.60"
    }
  }
}

provider "aws" {
  region = var.region
  default_tags {
    tags = {
      Project = "fairbroker"
      Cluster = var.name
    }
  }
}
