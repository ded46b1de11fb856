variable "env" {
  type = string
}

resource "terraform_data" "subnet" {
  input = var.env
}
