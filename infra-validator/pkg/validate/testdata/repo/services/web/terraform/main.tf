variable "env" {
  type = string
}

resource "terraform_data" "bucket" {
  input = "web-${var.env}"
}

output "bucket" {
  value = terraform_data.bucket.output
}
