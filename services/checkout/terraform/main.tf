# The checkout service's infrastructure. Only the built-in terraform_data
# resource is used, so the stack plans and applies without provider
# downloads (the quickstart and the tests run offline).
terraform {
  required_version = ">= 1.5.0"
}

variable "env" {
  type        = string
  description = "Environment name (staging, prod)."
}

module "queue" {
  source = "../../_modules/queue"
  name   = "checkout-${var.env}-orders"
}

resource "terraform_data" "payments_config" {
  input = {
    environment = var.env
    queue       = module.queue.name
    retention   = var.env == "prod" ? "14d" : "1d"
  }
}

output "queue" {
  value = module.queue.name
}
