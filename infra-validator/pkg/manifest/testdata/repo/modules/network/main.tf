variable "env" {
  type = string
}

module "subnet" {
  source = "./sub"
  env    = var.env
}
