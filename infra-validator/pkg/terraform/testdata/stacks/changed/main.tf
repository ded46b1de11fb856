variable "env" {
  type    = string
  default = "staging"
}

resource "terraform_data" "database" {
  input = {
    name = "db-${var.env}"
    size = 11
  }
}

resource "terraform_data" "cache" {
  input            = "cache-${var.env}"
  triggers_replace = [terraform_data.database.id]
}

module "app" {
  source = "../modules/app"
  env    = var.env
}

output "database" {
  value = terraform_data.database.output
}

output "replicas" {
  value = 3
}
