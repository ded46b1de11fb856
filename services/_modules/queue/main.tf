# A shared module: a stand-in for a message queue, as terraform_data.
variable "name" {
  type = string
}

resource "terraform_data" "queue" {
  input = {
    name       = var.name
    visibility = "30s"
  }
}

output "name" {
  value = terraform_data.queue.output.name
}
