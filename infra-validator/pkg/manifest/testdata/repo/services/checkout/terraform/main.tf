variable "env" {
  type = string
}

module "network" {
  source = "../../../modules/network"
  env    = var.env
}

module "remote" {
  source  = "terraform-aws-modules/vpc/aws"
  version = "5.0.0"
}
