module "app" {
  env    = var.env
  source = "../modules/app"
}

resource "terraform_data" "cache" {
  triggers_replace = [terraform_data.database.id]
  input            = "cache-${var.env}"
}

resource "terraform_data" "database" {
  input = {
    size = 10
    name = "db-${var.env}"
  }
}

variable "env" {
  default = "staging"
  type    = string
}
